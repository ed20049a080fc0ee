// sluice-stream with Kafka in and out, against a real broker (Apache Kafka
// in KRaft mode from Maven Central's jars, started by scripts/kafka/broker.sh
// on a loopback port for this suite and stopped after it). Input and output
// go through kcat (Debian's, not ours): the generator's YSB records are
// loaded into a 4-partition topic, one partition per generated worker file,
// and the job's rows are read back with isolation.level=read_committed.
// Checks: the Kafka run's records, rows, checksum and late counts equal the
// same query's on the same records from files, and the committed output
// topic holds exactly the file run's rows (no duplicate, no gap); a run that
// fails after writing its rows (a rank killed before the ranks agree to
// commit, unannounced, by `sluice run --kill-at`) commits nothing, though
// its rows are in the log (read_uncommitted: the transactions really ran),
// and a rerun under the same transactional id commits each row once; a
// message that is not a record fails the job naming topic, partition,
// offset, column and value. One test per suite (PER_SUITE): the broker is
// started once.
#include "stream/kafka.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
namespace ss = sluice::stream;
using sluice::testing::describe;
using sluice::testing::json_field;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

// kcat's path (run_process does not search PATH).
std::string kcat() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string p = std::string(dir) + "/kcat";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "kcat (not installed: make test-tools installs it)";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

class KafkaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("stream_kafka_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // The broker dies with this process whatever happens to it.
    const ProcessResult r = run_process({SLUICE_KAFKA_BROKER, "start", (dir_ / "broker").string()},
                                        {{"KAFKA_BROKER_OWNER_PID", std::to_string(getpid())}},
                                        std::chrono::seconds(120));
    for (const std::string& line : lines_of(r.output)) {
      if (line.rfind("bootstrap=", 0) == 0) bootstrap_ = line.substr(10);
    }
    if (r.exit_code != 0 || bootstrap_.empty()) {
      skip_ = "no Kafka broker (scripts/kafka/broker.sh start): " + r.output;
      bootstrap_.clear();
    }
  }
  static void TearDownTestSuite() {
    run_process({SLUICE_KAFKA_BROKER, "stop", (dir_ / "broker").string()}, {},
                std::chrono::seconds(60));
    fs::remove_all(dir_);
  }
  void SetUp() override {
    // Skipped only where there is no JDK (the broker script says "java not
    // found"); missing jars or a broker that does not start fail.
    if (!skip_.empty()) {
      if (skip_.find("java not found") != std::string::npos) GTEST_SKIP() << skip_;
      FAIL() << skip_;
    }
  }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static ss::KafkaConfig config() { return ss::KafkaConfig{bootstrap_, {}, 30'000}; }

  static ProcessResult stream(int ranks, std::vector<std::string> args,
                              const std::vector<std::string>& launcher = {}) {
    return run_process(sluice::testing::job_argv(ranks, 120, "sluice-stream", args, launcher), {},
                       std::chrono::seconds(150));
  }
  static std::string result(const ProcessResult& r) {
    return json_field(r.output, "records") + " records, " + json_field(r.output, "rows") +
           " rows, checksum " + json_field(r.output, "checksum") + ", late " +
           json_field(r.output, "late");
  }
  // The messages of `topic` as kcat reads them to the end of every partition.
  static std::vector<std::string> consume(const std::string& topic, bool committed = true) {
    const ProcessResult r = run_process(
        {kcat(), "-C", "-b", bootstrap_, "-t", topic, "-e", "-q", "-f", "%s\n", "-X",
         std::string("isolation.level=") + (committed ? "read_committed" : "read_uncommitted")},
        {}, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    auto out = lines_of(r.output);
    std::sort(out.begin(), out.end());
    return out;
  }
  // Loads `lines` into one partition of `topic` with kcat.
  static void produce(const std::string& topic, int partition,
                      const std::vector<std::string>& lines) {
    const std::string file = path(topic + "-" + std::to_string(partition) + ".lines");
    {
      std::ofstream out(file);
      for (const std::string& l : lines) out << l << '\n';
    }
    const ProcessResult r = run_process(
        {kcat(), "-P", "-b", bootstrap_, "-t", topic, "-p", std::to_string(partition), "-l", file},
        {}, std::chrono::seconds(60));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
  }

  // YSB input once for the suite: generated as 4 worker files (2 ranks x 2
  // workers), run from the files (the expected result and rows), and
  // loaded into topic ysb-in, partition p holding worker p's records in
  // order, without the worker and seq columns.
  static void load_ysb() {
    if (!expected_.empty()) return;
    const std::vector<std::string> gen = {
        "--query", "ysb",   "--workers", "2",      "--records",       "200000",     "--disorder",
        "40",      "--lag", "10",        "--json", "--input-csv-dir", dir_.string()};
    const ProcessResult g = stream(2, gen);
    ASSERT_EQ(g.exit_code, 0) << describe(g);
    const ProcessResult f =
        stream(2, {"--query", "ysb", "--workers", "2", "--lag", "10", "--json", "--input",
                   path("input-{worker}.csv"), "--csv-out", path("rows-{worker}.csv")});
    ASSERT_EQ(f.exit_code, 0) << describe(f);
    ASSERT_NE(json_field(f.output, "rows"), "0");
    file_result_ = result(f);
    for (int w = 0; w < 4; ++w) {
      std::ifstream rows(path("rows-" + std::to_string(w) + ".csv"));
      std::string line;
      std::getline(rows, line);  // header
      while (std::getline(rows, line)) expected_.push_back(line);
    }
    std::sort(expected_.begin(), expected_.end());
    ss::kafka_create_topic(config(), "ysb-in", 4);
    for (int w = 0; w < 4; ++w) {
      std::ifstream in(path("input-" + std::to_string(w) + ".csv"));
      std::string line;
      std::getline(in, line);  // header: worker,seq,...
      std::vector<std::string> records;
      while (std::getline(in, line)) {
        const size_t second = line.find(',', line.find(',') + 1);
        records.push_back(line.substr(second + 1));
      }
      produce("ysb-in", w, records);
    }
  }

  static inline fs::path dir_;
  static inline std::string bootstrap_, skip_, file_result_;
  static inline std::vector<std::string> expected_;
};

TEST_F(KafkaTest, YsbFromATopicToATopicEqualsTheRunOnTheSameRecordsFromFiles) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-out", 3);
  const ProcessResult r =
      stream(2, {"--query", "ysb", "--workers", "2", "--lag", "10", "--json", "--verify", "--kafka",
                 bootstrap_, "--kafka-input", "ysb-in", "--kafka-output", "ysb-out"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(result(r), file_result_) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(consume("ysb-out"), expected_);
}

TEST_F(KafkaTest, ARunThatFailsCommitsNothingAndARerunCommitsEachRowOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-retry", 3);
  const std::vector<std::string> args = {
      "--query", "ysb",      "--workers",     "2",      "--lag",          "10",       "--json",
      "--kafka", bootstrap_, "--kafka-input", "ysb-in", "--kafka-output", "ysb-retry"};
  // Rank 1 dies with its rows in the log in open transactions, before the
  // ranks agree to commit: rank 0 aborts its own, rank 1's are left open.
  const ProcessResult failed = stream(2, args, {"--kill-at", "1:stream-kafka-before-vote"});
  ASSERT_NE(failed.exit_code, 0) << describe(failed);
  EXPECT_TRUE(consume("ysb-retry").empty());
  // Every rank flushed its rows into the log before the vote: all are there.
  EXPECT_EQ(consume("ysb-retry", /*committed=*/false), expected_)
      << "the failed run's rows are not in the log: its transactions did not run";
  // The rerun (same transactional ids) fences rank 1's open transactions.
  const ProcessResult again = stream(2, args);
  ASSERT_EQ(again.exit_code, 0) << describe(again);
  EXPECT_EQ(result(again), file_result_) << again.output;
  EXPECT_EQ(consume("ysb-retry"), expected_);
}

TEST_F(KafkaTest, AMessageThatIsNotARecordFailsTheJobNamingItsOffset) {
  ss::kafka_create_topic(config(), "ro-bad", 1);
  produce("ro-bad", 0, {"5,100", "6,101", "7,x102", "8,103"});
  const ProcessResult r = stream(
      1, {"--query", "ro", "--workers", "1", "--kafka", bootstrap_, "--kafka-input", "ro-bad"});
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.output.find("topic ro-bad partition 0 offset 2: column 2 (time): 'x102' is not a "
                          "64-bit integer"),
            std::string::npos)
      << r.output;
  // A topic that does not exist is named, not waited for.
  const ProcessResult missing = stream(
      1, {"--query", "ro", "--workers", "1", "--kafka", bootstrap_, "--kafka-input", "no-such"});
  EXPECT_NE(missing.exit_code, 0) << describe(missing);
  EXPECT_NE(missing.output.find("Kafka topic no-such"), std::string::npos) << missing.output;
}

}  // namespace
