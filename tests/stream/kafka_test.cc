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
// offset, column and value; a checkpointed job (offsets per partition, a
// transaction per checkpoint interval) killed mid-run, from outside and
// between a checkpoint's completion and its commit, recovers in place and
// commits each row once; a job that follows the topic (--kafka-follow)
// reads what is added while it runs and, stopped by SIGTERM, commits the
// same rows as the bounded run over everything. One test per suite
// (PER_SUITE): the broker is started once.
#include "stream/kafka.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
namespace ss = sluice::stream;
using sluice::testing::BackgroundJob;
using sluice::testing::describe;
using sluice::testing::json_field;
using sluice::testing::json_number;
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

// What `got` has that `want` lacks and the reverse (multisets; both
// sorted), for a failure's message.
std::string difference(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  std::vector<std::string> extra, missing;
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::back_inserter(missing));
  std::string out = std::to_string(got.size()) + " rows, " + std::to_string(want.size()) +
                    " expected; " + std::to_string(extra.size()) + " more:";
  for (size_t i = 0; i < extra.size() && i < 10; ++i) out += " " + extra[i];
  out += "; " + std::to_string(missing.size()) + " missing:";
  for (size_t i = 0; i < missing.size() && i < 10; ++i) out += " " + missing[i];
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
                              const std::vector<std::string>& launcher = {},
                              const std::map<std::string, std::string>& env = {}) {
    return run_process(sluice::testing::job_argv(ranks, 120, "sluice-stream", args, launcher), env,
                       std::chrono::seconds(150));
  }
  static std::string result(const ProcessResult& r) {
    return json_field(r.output, "records") + " records, " + json_field(r.output, "rows") +
           " rows, checksum " + json_field(r.output, "checksum") + ", late " +
           json_field(r.output, "late");
  }
  // The messages of `topic` as kcat reads them to the end of every partition.
  // With `settle_to`: read again (for up to 15 s) until they are those. A
  // transaction's commit returns once the coordinator logged it; the markers
  // that make its messages visible to read_committed reach the partitions
  // after, so a read right after the job may stop short of them.
  static std::vector<std::string> consume(const std::string& topic, bool committed = true,
                                          const std::vector<std::string>* settle_to = nullptr) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (;;) {
      const ProcessResult r = run_process(
          {kcat(), "-C", "-b", bootstrap_, "-t", topic, "-e", "-q", "-f", "%s\n", "-X",
           std::string("isolation.level=") + (committed ? "read_committed" : "read_uncommitted")},
          {}, std::chrono::seconds(60));
      EXPECT_EQ(r.exit_code, 0) << describe(r);
      auto out = lines_of(r.output);
      std::sort(out.begin(), out.end());
      if (settle_to == nullptr || out == *settle_to || std::chrono::steady_clock::now() > give_up)
        return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  // Loads `lines` into one partition of `topic` with kcat, in order: with
  // the idempotent producer a retried batch (the broker busy or a leader not
  // yet elected, as on a loaded machine) can neither overtake the ones after
  // it nor be written twice (once, under load, a run without it had hundreds
  // more late records than the file run in its first two windows only).
  static void produce(const std::string& topic, int partition,
                      const std::vector<std::string>& lines) {
    const std::string file = path(topic + "-" + std::to_string(partition) + ".lines");
    {
      std::ofstream out(file);
      for (const std::string& l : lines) out << l << '\n';
    }
    const ProcessResult r =
        run_process({kcat(), "-P", "-b", bootstrap_, "-t", topic, "-p", std::to_string(partition),
                     "-X", "enable.idempotence=true", "-l", file},
                    {}, std::chrono::seconds(60));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
  }

  // The query of every run: YSB in 100 ms windows, 2 ranks x 2 workers.
  static std::vector<std::string> query(const std::string& workers = "2",
                                        const std::string& lag = "10") {
    return {"--query", "ysb", "--workers", workers, "--lag", lag, "--window-ms", "100"};
  }

  // YSB input once for the suite: generated as 4 worker files (2 ranks x 2
  // workers; 20 records per ms of event time, so 2.5 s of it and 25
  // windows), run from the files (the expected result and rows), and
  // loaded into topic ysb-in, partition p holding worker p's records in
  // order, without the worker and seq columns.
  static void load_ysb() {
    if (!expected_.empty()) return;
    std::vector<std::string> gen = query();
    gen.insert(gen.end(), {"--records", "200000", "--rate", "20", "--disorder", "40", "--json",
                           "--input-csv-dir", dir_.string()});
    const ProcessResult g = stream(2, gen);
    ASSERT_EQ(g.exit_code, 0) << describe(g);
    std::vector<std::string> files = query();
    files.insert(files.end(), {"--json", "--input", path("input-{worker}.csv"), "--csv-out",
                               path("rows-{worker}.csv")});
    const ProcessResult f = stream(2, files);
    ASSERT_EQ(f.exit_code, 0) << describe(f);
    ASSERT_NE(json_field(f.output, "rows"), "0");
    file_result_ = result(f);
    file_output_ = f.output;
    expected_ = csv_rows("rows");
    ss::kafka_create_topic(config(), "ysb-in", 4);
    for (int w = 0; w < 4; ++w) produce("ysb-in", w, worker_records(w));
  }
  // The rows of the 4 workers' --csv-out files <stem>-<worker>.csv, sorted.
  static std::vector<std::string> csv_rows(const std::string& stem) {
    std::vector<std::string> out;
    for (int w = 0; w < 4; ++w) {
      std::ifstream rows(path(stem + "-" + std::to_string(w) + ".csv"));
      std::string line;
      std::getline(rows, line);  // header
      while (std::getline(rows, line)) out.push_back(line);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Generated worker w's records as messages: its file's lines (in `dir`,
  // under the suite's directory) without the worker and seq columns.
  static std::vector<std::string> worker_records(int w, const std::string& dir = "") {
    std::ifstream in(path(dir + "input-" + std::to_string(w) + ".csv"));
    std::string line;
    std::getline(in, line);  // header: worker,seq,...
    std::vector<std::string> records;
    while (std::getline(in, line)) {
      const size_t second = line.find(',', line.find(',') + 1);
      records.push_back(line.substr(second + 1));
    }
    return records;
  }

  static inline fs::path dir_;
  static inline std::string bootstrap_, skip_, file_result_, file_output_;
  static inline std::vector<std::string> expected_;
  friend struct KafkaTestAccess;
};

// The fixture's helpers, for helpers outside its tests.
struct KafkaTestAccess : KafkaTest {
  using KafkaTest::config;
  using KafkaTest::consume;
  using KafkaTest::csv_rows;
  using KafkaTest::path;
  using KafkaTest::query;
  using KafkaTest::result;
  using KafkaTest::stream;
  static const std::string& bootstrap() { return bootstrap_; }
};

TEST_F(KafkaTest, YsbFromATopicToATopicEqualsTheRunOnTheSameRecordsFromFiles) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-out", 3);
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--verify", "--kafka", bootstrap_, "--kafka-input", "ysb-in",
                           "--kafka-output", "ysb-out"});
  const ProcessResult r = stream(2, args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(result(r), file_result_) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(consume("ysb-out", true, &expected_), expected_);
}

TEST_F(KafkaTest, ARunThatFailsCommitsNothingAndARerunCommitsEachRowOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-retry", 3);
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-in",
                           "--kafka-output", "ysb-retry"});
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
  EXPECT_EQ(consume("ysb-retry", true, &expected_), expected_);
}

// Upsert output (--upsert, allowed lateness 40 ms on input 40 ms out of
// order): a row goes out as its window ends and again each time a record
// within the lateness changes it, each message keyed by
// "window_start,window_end,key". What a compacted topic keeps (the last
// value of each key, which kcat's read of each partition in order gives) is
// each window's final row: the rows of a run with the same lateness from
// the files.
TEST_F(KafkaTest, UpsertRowsKeyedByWindowAndKeyEndAtTheFinalRows) {
  load_ysb();
  std::vector<std::string> files = query();
  files.insert(files.end(), {"--allowed-lateness", "40", "--json", "--input",
                             path("input-{worker}.csv"), "--csv-out", path("late-{worker}.csv")});
  const ProcessResult f = stream(2, files);
  ASSERT_EQ(f.exit_code, 0) << describe(f);
  const std::vector<std::string> want = csv_rows("late");
  ASSERT_FALSE(want.empty());

  // (Small epochs: windows fire often, so late records find theirs fired.
  // Whether one does depends on how the workers interleave: a run in which
  // none did checks nothing, and the case runs again, on a topic of its
  // own, at most 3 times.)
  ProcessResult r;
  std::string topic;
  for (int attempt = 0; attempt < 3; ++attempt) {
    topic = "ysb-upsert-" + std::to_string(attempt);
    ss::kafka_create_topic(config(), topic, 3);
    std::vector<std::string> args = query();
    args.insert(args.end(),
                {"--allowed-lateness", "40", "--upsert", "--epoch-mib", "0.01", "--json", "--kafka",
                 bootstrap_, "--kafka-input", "ysb-in", "--kafka-output", topic});
    r = stream(2, args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    if (json_number(r.output, "updates") > json_number(r.output, "rows")) break;
  }
  EXPECT_GT(json_number(r.output, "updates"), json_number(r.output, "rows"))
      << "no row was updated in 3 runs: the case checks nothing\n"
      << r.output;
  const ProcessResult read = run_process({kcat(), "-C", "-b", bootstrap_, "-t", topic, "-e", "-q",
                                          "-f", "%k\t%s\n", "-X", "isolation.level=read_committed"},
                                         {}, std::chrono::seconds(60));
  ASSERT_EQ(read.exit_code, 0) << describe(read);
  std::map<std::string, std::string> last;
  size_t messages = 0;
  for (const std::string& m : lines_of(read.output)) {
    const size_t tab = m.find('\t');
    ASSERT_NE(tab, std::string::npos) << m;
    const std::string key = m.substr(0, tab), value = m.substr(tab + 1);
    EXPECT_EQ(value.rfind(key + ",", 0), 0u) << "key " << key << " of row " << value;
    last[key] = value;
    ++messages;
  }
  EXPECT_EQ(messages, json_number(r.output, "updates"));
  std::vector<std::string> got;
  for (const auto& [key, value] : last) got.push_back(value);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

// Kafka in and out with checkpoints every 200 ms at a live pace, and rank 1
// killed: from outside after checkpoint 3, and at a kill point right after
// its done marker of checkpoint 4, before its transaction of that interval
// committed (the replacement finds no commit marker and writes those rows
// again). A restarted process takes its place, every rank restores the last
// complete checkpoint (input offsets per partition, window state, the
// sink's rows of the interval) and the committed output topic holds
// exactly the file run's rows: none lost, none twice.
TEST_F(KafkaTest, ACheckpointedJobKilledMidRunCommitsEachRowOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  struct Kill {
    std::string name;
    std::vector<std::string> launcher;
  };
  const std::vector<Kill> kills = {
      {"outside", {"--faults-after", "checkpoint 3 complete", "--kill", "1@0.05"}},
      {"before-commit", {"--kill-at", "1:stream-checkpoint-complete:7"}}};
  for (const Kill& k : kills) {
    SCOPED_TRACE(k.name);
    const std::string out = "ysb-ck-" + k.name;
    ss::kafka_create_topic(config(), out, 3);
    std::vector<std::string> args = query();
    args.insert(args.end(),
                {"--json", "--verify", "--throttle", "20000", "--kafka", bootstrap_,
                 "--kafka-input", "ysb-in", "--kafka-output", out, "--checkpoint-dir",
                 path("state-" + k.name), "--checkpoint-every", "200", "--recover-within", "30"});
    std::vector<std::string> launcher = {"--restarts", "1"};
    launcher.insert(launcher.end(), k.launcher.begin(), k.launcher.end());
    const ProcessResult r = stream(2, args, launcher);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_GE(json_number(r.output, "recoveries"), 1u) << r.output;
    EXPECT_GE(json_number(r.output, "restored_from"), 3u) << r.output;
    EXPECT_EQ(result(r), file_result_) << r.output;
    EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
    const std::vector<std::string> got = consume(out, true, &expected_);
    EXPECT_TRUE(got == expected_) << difference(got, expected_);
    if (k.name == "before-commit") {
      EXPECT_EQ(json_number(r.output, "restored_from"), 4u) << r.output;
      EXPECT_NE(r.output.find("wrote the rows of checkpoint 4 again"), std::string::npos)
          << r.output;
    }
  }
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

// The records the job's readers last said they had caught up with, in all.
uint64_t caught_up(const std::string& output, const std::string& topic = "ysb-follow") {
  return sluice::testing::sum_of_latest(
      output, "caught up with topic " + topic + R"( partitions ([0-9,]+): ([0-9]+) records read)");
}

// --kafka-follow: the job reads the first half of every partition and says
// it caught up; nothing is committed while it runs (its transactions are
// open); kcat adds the second halves and the job reads them too; then
// `sluice run` gets SIGTERM (as from Ctrl-C) and forwards it: every reader
// ends its input where it got to, every window fires, the output commits.
// The committed rows equal the bounded run's over the same records (the
// file run's), and so do records, rows, checksum and late counts.
TEST_F(KafkaTest, AFollowingJobReadsWhatIsAddedWhileItRunsAndStopsOnSigterm) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-follow", 4);
  ss::kafka_create_topic(config(), "ysb-follow-out", 3);
  std::vector<std::vector<std::string>> halves[2];
  uint64_t first_half = 0, total = 0;
  for (int w = 0; w < 4; ++w) {
    const std::vector<std::string> all = worker_records(w);
    const auto mid = all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2);
    halves[0].emplace_back(all.begin(), mid);
    halves[1].emplace_back(mid, all.end());
    first_half += halves[0].back().size();
    total += all.size();
    produce("ysb-follow", w, halves[0].back());
  }
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-follow",
                           "--kafka-follow", "--kafka-output", "ysb-follow-out"});
  BackgroundJob job(sluice::testing::job_argv(2, 120, "sluice-stream", args));
  ASSERT_TRUE(job.read_until([&](const std::string& o) { return caught_up(o) == first_half; },
                             std::chrono::seconds(60)))
      << job.output();
  EXPECT_TRUE(consume("ysb-follow-out").empty()) << "rows committed before the stop";
  for (int w = 0; w < 4; ++w) produce("ysb-follow", w, halves[1][w]);
  ASSERT_TRUE(job.read_until([&](const std::string& o) { return caught_up(o) == total; },
                             std::chrono::seconds(60)))
      << job.output();
  ASSERT_TRUE(job.stop()) << job.output();
  const std::string& out = job.output();
  EXPECT_EQ(sluice::testing::count_lines_with(out, "sluice: SIGTERM: stopping"), 2) << out;
  EXPECT_EQ(sluice::testing::count_lines_with(out, "stopping the input from topic ysb-follow"), 4)
      << out;
  EXPECT_EQ(sluice::testing::count_lines_with(out, "exited with status"), 0) << out;
  ProcessResult r;
  r.output = out;
  EXPECT_EQ(result(r), file_result_) << out;
  EXPECT_EQ(consume("ysb-follow-out", true, &expected_), expected_);
}

// Stop with a savepoint, then go on from it (--stop-with-savepoint, as
// Flink's `stop --savepointPath` for an upgrade): a following job reads the
// first half of every partition, SIGTERM stops it at a savepoint (the rows
// of the windows that fired are committed, each once); kcat adds the
// second halves; a job started from the savepoint reads only what came
// after it and, stopped by SIGTERM as usual, commits the rest: the topic
// then holds the file run's rows, each once, and the second job's counts
// (restored from the savepoint) are the file run's.
TEST_F(KafkaTest, AJobStoppedAtASavepointGoesOnFromItWithEachRowCommittedOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-save", 4);
  ss::kafka_create_topic(config(), "ysb-save-out", 3);
  std::vector<std::string> halves[2][4];
  uint64_t first_half = 0, total = 0;
  for (int w = 0; w < 4; ++w) {
    const std::vector<std::string> all = worker_records(w);
    const auto mid = all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2);
    halves[0][w].assign(all.begin(), mid);
    halves[1][w].assign(mid, all.end());
    first_half += halves[0][w].size();
    total += all.size();
    produce("ysb-save", w, halves[0][w]);
  }
  fs::remove_all(path("save-state"));
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-save",
                           "--kafka-follow", "--kafka-output", "ysb-save-out", "--checkpoint-dir",
                           path("save-state"), "--checkpoint-every", "200"});
  std::vector<std::string> stopping = args;
  stopping.push_back("--stop-with-savepoint");
  BackgroundJob first(sluice::testing::job_argv(2, 120, "sluice-stream", stopping));
  ASSERT_TRUE(
      first.read_until([&](const std::string& o) { return caught_up(o, "ysb-save") == first_half; },
                       std::chrono::seconds(60)))
      << first.output();
  ASSERT_TRUE(first.stop()) << first.output();
  const std::string& out1 = first.output();
  EXPECT_EQ(sluice::testing::count_lines_with(out1, "exited with status"), 0) << out1;
  EXPECT_EQ(sluice::testing::count_lines_with(out1, "stopping the input"), 0) << out1;
  const uint64_t savepoint = json_number(out1, "savepoint");
  ASSERT_GE(savepoint, 1u) << out1;
  EXPECT_EQ(json_number(out1, "records"), first_half) << out1;
  // What the savepoint committed: rows of the expected result, each once.
  std::vector<std::string> committed = consume("ysb-save-out");
  const std::set<std::string> once(committed.begin(), committed.end());
  EXPECT_EQ(once.size(), committed.size());
  const std::set<std::string> all(expected_.begin(), expected_.end());
  EXPECT_TRUE(std::includes(all.begin(), all.end(), once.begin(), once.end()));
  EXPECT_GT(committed.size(), 0u);
  EXPECT_LT(committed.size(), expected_.size());

  for (int w = 0; w < 4; ++w) produce("ysb-save", w, halves[1][w]);
  args.push_back("--restore");
  BackgroundJob second(sluice::testing::job_argv(2, 120, "sluice-stream", args));
  ASSERT_TRUE(second.read_until(
      [&](const std::string& o) { return caught_up(o, "ysb-save") == total - first_half; },
      std::chrono::seconds(60)))
      << second.output();
  ASSERT_TRUE(second.stop()) << second.output();
  const std::string& out2 = second.output();
  EXPECT_EQ(sluice::testing::count_lines_with(out2, "exited with status"), 0) << out2;
  EXPECT_EQ(json_number(out2, "restored_from"), savepoint) << out2;
  ProcessResult r;
  r.output = out2;
  EXPECT_EQ(result(r), file_result_) << out2;
  EXPECT_EQ(consume("ysb-save-out", true, &expected_), expected_);
}

// Rescaling through savepoints (as Flink rescales: stop with a savepoint,
// start again with another parallelism): the topic gets its records in
// thirds; a job of 2 ranks x 2 workers reads the first and stops at a
// savepoint; a job of 3 ranks x 2 workers starts from it (each worker
// takes the window state of the keys it owns now from every old worker's
// snapshot, and the offsets of its partitions), reads the second third and
// stops at a savepoint; a job of 2 x 2 again starts from that and reads
// the rest. The topic then holds the file run's rows, each once, and the
// last job's counts (records, rows, checksum, late records) are the file
// run's. (Each worker reads at most one partition at every size, so each
// partition's watermark, which decides what is late, is the file run's.)
TEST_F(KafkaTest, AJobRescaledFrom2To3To2RanksThroughSavepointsGivesTheFileRunsRows) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-scale", 4);
  ss::kafka_create_topic(config(), "ysb-scale-out", 3);
  std::vector<std::string> parts[3][4];
  uint64_t sizes[3] = {0, 0, 0};
  for (int w = 0; w < 4; ++w) {
    const std::vector<std::string> all = worker_records(w);
    const size_t third = all.size() / 3;
    const auto b = all.begin();
    parts[0][w].assign(b, b + static_cast<std::ptrdiff_t>(third));
    parts[1][w].assign(b + static_cast<std::ptrdiff_t>(third),
                       b + static_cast<std::ptrdiff_t>(2 * third));
    parts[2][w].assign(b + static_cast<std::ptrdiff_t>(2 * third), all.end());
    for (int k = 0; k < 3; ++k) sizes[k] += parts[k][w].size();
  }
  fs::remove_all(path("scale-state"));
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-scale",
                           "--kafka-follow", "--kafka-output", "ysb-scale-out", "--checkpoint-dir",
                           path("scale-state"), "--checkpoint-every", "200"});
  // Each step: this third into the topic, then a job of `ranks` ranks that
  // reads it and stops (at a savepoint, but for the last).
  const auto step = [&](int k, int ranks, bool last) {
    for (int w = 0; w < 4; ++w) produce("ysb-scale", w, parts[k][w]);
    std::vector<std::string> a = args;
    if (k > 0) a.push_back("--restore");
    if (!last) a.push_back("--stop-with-savepoint");
    BackgroundJob job(sluice::testing::job_argv(ranks, 120, "sluice-stream", a));
    EXPECT_TRUE(
        job.read_until([&](const std::string& o) { return caught_up(o, "ysb-scale") == sizes[k]; },
                       std::chrono::seconds(60)))
        << job.output();
    EXPECT_TRUE(job.stop()) << job.output();
    EXPECT_EQ(sluice::testing::count_lines_with(job.output(), "exited with status"), 0)
        << job.output();
    return job.output();
  };
  const std::string first = step(0, 2, false);
  ASSERT_GE(json_number(first, "savepoint"), 1u) << first;
  EXPECT_EQ(json_number(first, "records"), sizes[0]) << first;

  const std::string wider = step(1, 3, false);
  ASSERT_GE(json_number(wider, "savepoint"), 1u) << wider;
  EXPECT_EQ(json_number(wider, "restored_from"), json_number(first, "savepoint")) << wider;
  EXPECT_EQ(json_number(wider, "rescaled_from"), 4u) << wider;
  EXPECT_EQ(json_number(wider, "records"), sizes[0] + sizes[1]) << wider;

  const std::string back = step(2, 2, true);
  EXPECT_EQ(json_number(back, "restored_from"), json_number(wider, "savepoint")) << back;
  EXPECT_EQ(json_number(back, "rescaled_from"), 6u) << back;
  ProcessResult r;
  r.output = back;
  EXPECT_EQ(result(r), file_result_) << back;
  EXPECT_EQ(consume("ysb-scale-out", true, &expected_), expected_);
}

// An elastic job's query and input: the file run's flags (2 ranks x 2
// workers, the expected rows: --csv-out <stem>-<worker>.csv), the elastic
// run's (one worker a rank), and the same records in a topic of 4
// partitions.
struct ElasticQuery {
  std::vector<std::string> files, elastic;
  std::string topic, stem;
};

// YSB as the other tests run it, with a watermark lag above the records'
// disorder (50 ms against 40): no record is late, so the rows do not
// depend on which worker read which partition (with fewer workers than
// partitions a worker's watermark is the smallest of its partitions').
ElasticQuery elastic_ysb() {
  std::vector<std::string> files = KafkaTestAccess::query("2", "50");
  files.insert(files.end(), {"--input", KafkaTestAccess::path("input-{worker}.csv")});
  return {files, KafkaTestAccess::query("1", "50"), "ysb-in", "lag50"};
}

// An elastic job (--elastic) of 2 ranks of at most 3 rank numbers, one
// worker each, reading q.topic live (sluice run with `launcher` too) into
// topic `out`, which a process joins after its third checkpoint (every
// rank stops at a savepoint, and the three go on from it). Its rows must
// be the file run's, each committed once, and its counts that run's.
// Returns the job's output.
std::string elastic_job(const ElasticQuery& q, const std::string& out,
                        const std::vector<std::string>& launcher,
                        const std::map<std::string, std::string>& env = {}, bool join = true) {
  static std::map<std::string, std::pair<ProcessResult, std::vector<std::string>>> runs;
  auto& [files, want] = runs[q.stem];
  if (want.empty()) {
    std::vector<std::string> args = q.files;
    args.insert(args.end(),
                {"--json", "--csv-out", KafkaTestAccess::path(q.stem + "-{worker}.csv")});
    files = KafkaTestAccess::stream(2, args);
    EXPECT_EQ(files.exit_code, 0) << describe(files);
    EXPECT_EQ(json_number(files.output, "late_total"), 0u) << files.output;
    want = KafkaTestAccess::csv_rows(q.stem);
  }
  ss::kafka_create_topic(KafkaTestAccess::config(), out, 3);
  std::vector<std::string> args = q.elastic;
  args.insert(args.end(),
              {"--json", "--throttle", "20000", "--kafka", KafkaTestAccess::bootstrap(),
               "--kafka-input", q.topic, "--kafka-output", out, "--checkpoint-dir",
               KafkaTestAccess::path(out + "-state"), "--checkpoint-every", "100", "--elastic"});
  std::vector<std::string> l;
  if (join) l = {"--max-ranks", "3", "--faults-after", "checkpoint 3 complete", "--join", "0"};
  l.insert(l.end(), launcher.begin(), launcher.end());
  const ProcessResult r = KafkaTestAccess::stream(2, args, l, env);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  if (join) {
    EXPECT_NE(r.output.find("rank 2 joined"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("goes on in view 1 with ranks 0,1,2"), std::string::npos) << r.output;
    EXPECT_EQ(json_number(r.output, "ranks"), 2u) << r.output;
  }
  EXPECT_EQ(KafkaTestAccess::result(r), KafkaTestAccess::result(files)) << r.output;
  const std::vector<std::string> got = KafkaTestAccess::consume(out, true, &want);
  EXPECT_TRUE(got == want) << difference(got, want);
  return r.output;
}

// Rank 1 asked to leave 0.3 s after the first checkpoint of the run the
// joiner grew to 3 workers (view 1): however long the join took, the
// savepoint it leaves at is that run's.
constexpr const char* kAfterTheGrownRunsCheckpoint = "1@0.3 after workers in view 1";

// Grown to 3 ranks by the joiner, the job shrinks again when rank 1 is
// asked to leave (SIGTERM from sluice run --leave): it stops at a
// savepoint with the others and leaves, and ranks 0 and 2 go on from that
// savepoint, which 3 workers took.
TEST_F(KafkaTest, AnElasticJobGrowsFrom2To3RanksAndShrinksTo2WhileItRunsCommittingEachRowOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  const std::string out =
      elastic_job(elastic_ysb(), "ysb-elastic-leave", {"--leave", kAfterTheGrownRunsCheckpoint});
  EXPECT_NE(out.find("rank 1 leaves the job at savepoint"), std::string::npos) << out;
  EXPECT_NE(out.find("with ranks 0,2 from"), std::string::npos) << out;
  EXPECT_EQ(json_number(out, "rescaled_from"), 3u) << out;
}

// An elastic job loses a rank and no replacement comes (--keep-going):
// the others go on without it from the last complete checkpoint,
// rescaled. Grown to 3 ranks and then the joiner (rank 2) killed from
// outside 0.3 s after that run's first checkpoint (so the survivors go on
// from a checkpoint 3 workers took, however long the join took), over ofi (where a survivor
// flushing toward the dead rank must see the loss though its provider's queue stays full): the
// transaction it left open (its rows since that checkpoint) is fenced, so that read_committed
// readers are not held back until the broker's timeout. Without a joiner, rank 1 killed by its own
// kill point between its 5th checkpoint's completion and that checkpoint's commit: its rows of that
// checkpoint, in the snapshot, are written again by the worker that now has
// its number modulo the new size (rank 0, alone).
TEST_F(KafkaTest, AnElasticJobThatLosesARankGoesOnWithoutItCommittingEachRowOnce) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  const std::string outside = elastic_job(
      elastic_ysb(), "ysb-elastic-kill",
      {"--keep-going", "--kill", "2@0.3 after workers in view 1"}, {{"SLUICE_TRANSPORT", "ofi"}});
  EXPECT_NE(outside.find("injecting --kill 2@0.3 after"), std::string::npos) << outside;
  EXPECT_NE(outside.find("\"transport\":\"ofi\""), std::string::npos) << outside;
  EXPECT_NE(outside.find("with ranks 0,1 from"), std::string::npos) << outside;
  EXPECT_EQ(json_number(outside, "rescaled_from"), 3u) << outside;

  // (Without a joiner, so that the kill point's pass is reached early on
  // every machine: rank 0 goes on alone, rescaled from 2 workers to 1.)
  const std::string before_commit =
      elastic_job(elastic_ysb(), "ysb-elastic-kill-at",
                  {"--keep-going", "--kill-at", "1:stream-checkpoint-complete:5"}, {},
                  /*join=*/false);
  EXPECT_NE(before_commit.find("with ranks 0 from"), std::string::npos) << before_commit;
  EXPECT_NE(before_commit.find("wrote the rows of old worker 1 at checkpoint 5 again"),
            std::string::npos)
      << before_commit;
  EXPECT_EQ(json_number(before_commit, "rescaled_from"), 2u) << before_commit;
  EXPECT_EQ(json_number(before_commit, "ranks"), 1u) << before_commit;
}

// Session windows through the same rescales: NEXMark Q11 (bids per
// bidder per session of 10 s) on generated bids, 10,000 bidders whose
// sessions stay open until the input ends, so that every rescale moves
// all of them (the sessions' keyed state, restored by key on the new
// workers); the bids are in order per partition, so none is late at any
// size. Grown to 3 ranks and back to 2 (rank 1 leaves).
TEST_F(KafkaTest, AnElasticSessionJobMovesItsOpenSessionsWithEachRescale) {
  ASSERT_FALSE(bootstrap_.empty());
  const ProcessResult g = stream(2, {"--query", "q11", "--workers", "2", "--records", "200000",
                                     "--json", "--input-csv-dir", path("q11")});
  ASSERT_EQ(g.exit_code, 0) << describe(g);
  ss::kafka_create_topic(config(), "q11-in", 4);
  for (int w = 0; w < 4; ++w) produce("q11-in", w, worker_records(w, "q11/"));
  const ElasticQuery q{
      {"--query", "q11", "--workers", "2", "--input", path("q11/input-{worker}.csv")},
      {"--query", "q11", "--workers", "1"},
      "q11-in",
      "q11-rows"};
  const std::string out = elastic_job(q, "q11-elastic", {"--leave", kAfterTheGrownRunsCheckpoint});
  EXPECT_NE(out.find("rank 1 leaves the job at savepoint"), std::string::npos) << out;
  EXPECT_NE(out.find("with ranks 0,2 from"), std::string::npos) << out;
  EXPECT_EQ(json_number(out, "rescaled_from"), 3u) << out;
  EXPECT_EQ(json_number(out, "rows"), 10000u) << out;
}

// --kafka-event-time timestamp: the generated records go to a topic
// without their event_time column, each message stamped with its record's
// event time plus a day before now (so that no stamp is 0, which a
// producer reads as "now", and none is older than the broker's retention);
// kcat reads the stamps back. The job's rows are the file
// run's with every window moved by the same amount, and its counts of
// records, rows and late records are the file run's.
TEST_F(KafkaTest, MessageTimestampsAsEventTimeGiveTheFileRunsWindows) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  // A day before now, in whole seconds (a multiple of the window): stamps
  // must be recent, or the broker's retention (7 days) deletes the log
  // while the job reads it.
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const int64_t kBase = (now_s - 86'400) * 1000;
  ss::kafka_create_topic(config(), "ysb-stamped", 4);
  ss::kafka_create_topic(config(), "ysb-stamped-out", 3);
  {
    ss::KafkaWriter writer(config(), "ysb-stamped", "ysb-stamped-loader");
    for (int w = 0; w < 4; ++w) {
      for (const std::string& line : worker_records(w)) {
        // user_id,page_id,ad_id,campaign_id,ad_type,event_type,event_time,ip
        std::vector<std::string> f;
        std::istringstream in(line);
        for (std::string x; std::getline(in, x, ',');) f.push_back(x);
        ASSERT_EQ(f.size(), 8u) << line;
        const int64_t t = kBase + std::stoll(f[6]);
        f.erase(f.begin() + 6);
        std::string value;
        for (const std::string& x : f) value += (value.empty() ? "" : ",") + x;
        writer.write("", value, t, w);
      }
    }
    writer.commit();
  }
  const ProcessResult stamps = run_process(
      {kcat(), "-C", "-b", bootstrap_, "-t", "ysb-stamped", "-p", "0", "-o", "beginning", "-c", "1",
       "-e", "-q", "-f", "%T %s\n", "-X", "isolation.level=read_committed"},
      {}, std::chrono::seconds(60));
  ASSERT_EQ(stamps.exit_code, 0) << describe(stamps);
  EXPECT_EQ(stamps.output.rfind(std::to_string(kBase / 1000), 0), 0u) << stamps.output;
  std::vector<std::string> args = query();
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-stamped",
                           "--kafka-event-time", "timestamp", "--kafka-output", "ysb-stamped-out"});
  const ProcessResult r = stream(2, args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* field : {"records", "rows"}) {
    EXPECT_EQ(json_field(r.output, field), json_field(file_output_, field)) << r.output;
  }
  // Late records per window start: the file run's, each window moved.
  static const std::regex late_entry(R"re("(-?[0-9]+)":([0-9]+))re");
  auto late_of = [](const std::string& output, int64_t shift) {
    const std::string late = json_field(output, "late");
    std::map<int64_t, uint64_t> m;
    for (auto it = std::sregex_iterator(late.begin(), late.end(), late_entry);
         it != std::sregex_iterator(); ++it) {
      m[std::stoll((*it)[1].str()) - shift] = std::stoull((*it)[2].str());
    }
    return m;
  };
  EXPECT_EQ(late_of(r.output, kBase), late_of(file_output_, 0)) << r.output;
  EXPECT_FALSE(late_of(file_output_, 0).empty()) << file_output_;
  std::vector<std::string> moved;
  for (const std::string& row : expected_) {
    // window_start,window_end,key,value
    const size_t a = row.find(','), b = row.find(',', a + 1);
    moved.push_back(std::to_string(kBase + std::stoll(row.substr(0, a))) + "," +
                    std::to_string(kBase + std::stoll(row.substr(a + 1, b - a - 1))) +
                    row.substr(b));
  }
  std::sort(moved.begin(), moved.end());
  const std::vector<std::string> got = consume("ysb-stamped-out");
  EXPECT_TRUE(got == moved) << difference(got, moved);
  // A message without the stamp's column count is refused by name.
  ss::kafka_create_topic(config(), "ro-stamped-bad", 1);
  produce("ro-stamped-bad", 0, {"5", "6,101"});
  const ProcessResult bad =
      stream(1, {"--query", "ro", "--workers", "1", "--kafka", bootstrap_, "--kafka-input",
                 "ro-stamped-bad", "--kafka-event-time", "timestamp"});
  EXPECT_NE(bad.exit_code, 0) << describe(bad);
  EXPECT_NE(bad.output.find("topic ro-stamped-bad partition 0 offset 1: 2 fields where 1 are "
                            "expected (without a header, the columns key)"),
            std::string::npos)
      << bad.output;
}

// Watermarks per partition: one rank of 2 workers reads the 4 partitions
// of ysb-in, 2 each, interleaved as the broker returns them. With a lag
// of 50 ms (the records' disorder is at most 40 ms within a partition) no
// record is late, as in the file run where each worker reads one file; a
// watermark per worker (the largest time of either partition) made
// thousands late whenever one partition's batch ran ahead of the other's.
TEST_F(KafkaTest, AWorkerReadingTwoPartitionsKeepsAWatermarkForEach) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  std::vector<std::string> files = query("2", "50");
  files.insert(files.end(), {"--json", "--input", path("input-{worker}.csv")});
  const ProcessResult f = stream(2, files);
  ASSERT_EQ(f.exit_code, 0) << describe(f);
  ASSERT_EQ(json_field(f.output, "late"), "{}") << f.output;
  std::vector<std::string> args = query("2", "50");
  args.insert(args.end(), {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-in"});
  const ProcessResult r = stream(1, args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(result(r), result(f)) << r.output;
}

// --kafka-idle-ms: a following job of 2 ranks x 3 workers reads a topic of
// 6 partitions of which 4 hold records; workers 4 and 5 read the empty ones.
// Without idleness their watermarks hold every window back until the stop
// (nothing committed while it runs); with it they follow the others, so
// windows fire and checkpoints commit rows while the job runs. After
// SIGTERM the committed rows are the file run's, each once.
TEST_F(KafkaTest, IdlePartitionsDoNotHoldAFollowingJobsWindowsBack) {
  load_ysb();
  ASSERT_FALSE(expected_.empty());
  ss::kafka_create_topic(config(), "ysb-idle", 6);
  ss::kafka_create_topic(config(), "ysb-idle-out", 3);
  for (int w = 0; w < 4; ++w) produce("ysb-idle", w, worker_records(w));
  std::vector<std::string> args = query("3");
  args.insert(args.end(),
              {"--json", "--kafka", bootstrap_, "--kafka-input", "ysb-idle", "--kafka-follow",
               "--kafka-idle-ms", "300", "--kafka-output", "ysb-idle-out", "--checkpoint-dir",
               path("state-idle"), "--checkpoint-every", "200"});
  BackgroundJob job(sluice::testing::job_argv(2, 120, "sluice-stream", args));
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  size_t mid_run = 0;
  while (mid_run == 0 && std::chrono::steady_clock::now() < end) {
    job.read_until([](const std::string&) { return false; }, std::chrono::seconds(1));
    mid_run = consume("ysb-idle-out").size();
  }
  EXPECT_GT(mid_run, 0u) << "no row committed while the job ran: " << job.output();
  ASSERT_TRUE(job.stop()) << job.output();
  const std::string& out = job.output();
  EXPECT_EQ(sluice::testing::count_lines_with(out, "exited with status"), 0) << out;
  ProcessResult r;
  r.output = out;
  EXPECT_EQ(result(r), file_result_) << out;
  const std::vector<std::string> got = consume("ysb-idle-out", true, &expected_);
  EXPECT_TRUE(got == expected_) << difference(got, expected_);
}

}  // namespace
