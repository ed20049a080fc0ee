// sluice-stream reading its input from files (--input): the generator writes
// every worker's input as binary records and as CSV (--input-binary-dir,
// --input-csv-dir), and the query on those files must give the rows, the
// checksum and the late counts of the query on the generated input, with
// disorder and late records, over a file per worker ({worker}) and over one
// file all workers share (and --verify against the reference on the files);
// bad input fails every rank with a message naming it, nothing left in
// /dev/shm. Reading files does not depend on the transport: shm only.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::json_field;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

ProcessResult run_file_job(int ranks, const std::vector<std::string>& args) {
  return run_process(sluice::testing::job_argv(ranks, 90, "sluice-stream", args), {},
                     std::chrono::seconds(120));
}

class FileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("stream_files_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // What a run printed that must not depend on where its input came from.
  static std::string result(const ProcessResult& r) {
    return json_field(r.output, "records") + " records, " + json_field(r.output, "rows") +
           " rows, checksum " + json_field(r.output, "checksum") + ", late " +
           json_field(r.output, "late");
  }
  // The followed-file cases' query: ysb, 2 ranks x 2 workers, with
  // disorder and late records.
  static std::vector<std::string> followed_query() {
    return {"--query", "ysb",        "--workers", "2",     "--records", "200000", "--rate",
            "5",       "--disorder", "400",       "--lag", "50",        "--json"};
  }
  // The run of `query` that writes its generated input as CSV files
  // (input-<worker>.csv in the test's directory).
  ProcessResult write_csv_input(std::vector<std::string> query) const {
    query.insert(query.end(), {"--input-csv-dir", dir_.string()});
    return run_file_job(2, query);
  }
  std::filesystem::path dir_;
};

// Each query kind from binary files (one per worker), and the ones whose
// CSV holds whole records from CSV too, equal the generated run.
TEST_F(FileInputTest, FilesGiveTheResultsOfTheGeneratedInput) {
  struct Case {
    std::string query;
    std::vector<std::string> extra;
    bool csv;
  };
  const std::vector<Case> cases = {
      {"ysb", {"--disorder", "40", "--lag", "10"}, true},
      {"cm", {}, true},
      {"nb7", {"--window-ms", "100", "--max-price", "50", "--disorder", "20"}, true},
      {"q11", {"--keys", "50"}, true},
      {"nb8", {"--records", "40000"}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    const std::string sub = path(c.query);  // made by the generating run
    std::vector<std::string> base = {"--query",   c.query,  "--workers", "2",
                                     "--records", "200000", "--json"};
    base.insert(base.end(), c.extra.begin(), c.extra.end());
    std::vector<std::string> gen = base;
    gen.insert(gen.end(), {"--input-binary-dir", sub, "--input-csv-dir", sub});
    const ProcessResult g = run_file_job(2, gen);
    ASSERT_EQ(g.exit_code, 0) << g.output;
    ASSERT_NE(json_field(g.output, "rows"), "0") << g.output;
    for (const std::string& file : std::vector<std::string>{
             sub + "/input-{worker}.bin", c.csv ? sub + "/input-{worker}.csv" : std::string()}) {
      if (file.empty()) continue;
      std::vector<std::string> args = base;
      args.insert(args.end(), {"--input", file, "--verify"});
      const ProcessResult r = run_file_job(2, args);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(result(r), result(g)) << file << "\n" << r.output;
      EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
    }
  }
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// One binary file shared by every worker: worker g takes records
// [n*g/W, n*(g+1)/W). The workers' files concatenated in order, with equal
// counts, are split back into the same parts.
TEST_F(FileInputTest, OneSharedFileIsSplitAmongTheWorkers) {
  const std::vector<std::string> base = {"--query",   "ysb",    "--workers",  "2",
                                         "--records", "400000", "--disorder", "30",
                                         "--lag",     "30",     "--json"};
  std::vector<std::string> gen = base;
  gen.insert(gen.end(), {"--input-binary-dir", dir_.string()});
  const ProcessResult g = run_file_job(2, gen);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  {
    std::ofstream all(path("all.bin"), std::ios::binary);
    for (int w = 0; w < 4; ++w) {
      std::ifstream in(path("input-" + std::to_string(w) + ".bin"), std::ios::binary);
      all << in.rdbuf();
    }
  }
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--input", path("all.bin"), "--verify"});
  const ProcessResult r = run_file_job(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(result(r), result(g)) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
}

// A CSV file's header is read: columns in another order are read by name
// (the same result), and a file without a header runs only with
// --no-header (its first record is not taken for a header).
TEST_F(FileInputTest, CsvColumnsAreReadByTheHeaderOrInOrderWithNoHeader) {
  const std::vector<std::string> base = {"--query", "ro",        "--workers", "1",
                                         "--json",  "--records", "20000",     "--window-ms",
                                         "100",     "--keys",    "50"};
  std::vector<std::string> gen = base;
  gen.insert(gen.end(), {"--input-csv-dir", dir_.string()});
  const ProcessResult g = run_file_job(1, gen);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  std::ifstream in(path("input-0.csv"));
  std::string line;
  std::getline(in, line);
  ASSERT_EQ(line, "worker,seq,key,time");
  std::ofstream swapped(path("swapped.csv")), bare(path("bare.csv"));
  swapped << "time,key\n";
  while (std::getline(in, line)) {
    const auto c1 = line.find(','), c2 = line.find(',', c1 + 1);
    const std::string key = line.substr(c2 + 1, line.rfind(',') - c2 - 1);
    const std::string time = line.substr(line.rfind(',') + 1);
    swapped << time << ',' << key << '\n';
    bare << key << ',' << time << '\n';
  }
  swapped.close();
  bare.close();
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--input", path("swapped.csv")},
        std::vector<std::string>{"--input", path("bare.csv"), "--no-header"}}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("--verify");
    const ProcessResult r = run_file_job(1, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(result(r), result(g)) << r.output;
    EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  }
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--input", path("bare.csv")});
  const ProcessResult r = run_file_job(1, args);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bare.csv:1: the header names a column"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a file without a header needs --no-header"), std::string::npos)
      << r.output;
  args = base;
  args.push_back("--no-header");
  const ProcessResult u = run_file_job(1, args);
  EXPECT_EQ(u.exit_code, 2) << u.output;
  EXPECT_NE(u.output.find("--no-header describe --input files, and no --input is given"),
            std::string::npos)
      << u.output;
}

TEST_F(FileInputTest, BadInputFailsEveryRankNamingIt) {
  const std::vector<std::string> base = {"--query", "ysb", "--workers", "1", "--json"};
  // A file that is missing for one worker.
  {
    std::ofstream(path("in-0.bin"), std::ios::binary) << std::string(78 * 10, '\0');
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--input", path("in-{worker}.bin")});
    const ProcessResult r = run_file_job(2, args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1 cannot read its input: cannot open the input file " +
                            path("in-1.bin")),
              std::string::npos)
        << r.output;
  }
  // A binary file that is not a whole number of records.
  {
    std::ofstream(path("odd.bin"), std::ios::binary) << std::string(78 * 3 + 5, '\0');
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--input", path("odd.bin")});
    const ProcessResult r = run_file_job(1, args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("holds 239 bytes, not a whole number of 78-byte records"),
              std::string::npos)
        << r.output;
  }
  // A malformed CSV line (named by file, line, column and value), a file
  // with a header and no records (an input of no records is refused), and
  // CSV for a query whose CSV is not whole records.
  {
    std::ofstream(path("bad.csv")) << "worker,seq,key,time\n0,0,5,1\n0,1,x,2\n";
    std::vector<std::string> args = {"--query", "ro",      "--workers",    "1",
                                     "--json",  "--input", path("bad.csv")};
    const ProcessResult r = run_file_job(1, args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 0 cannot read its input: " + path("bad.csv") +
                            ":3: column 3 (key): 'x' is not an unsigned 64-bit integer"),
              std::string::npos)
        << r.output;
    std::ofstream(path("none.csv")) << "key,time\n";
    args = {"--query", "ro", "--workers", "1", "--input", path("none.csv")};
    const ProcessResult none = run_file_job(2, args);
    EXPECT_NE(none.exit_code, 0) << none.output;
    EXPECT_NE(none.output.find("the input " + path("none.csv") + " holds no records"),
              std::string::npos)
        << none.output;
    args = {"--query", "nb8", "--workers", "1", "--input", path("bad.csv")};
    const ProcessResult n = run_file_job(1, args);
    EXPECT_NE(n.exit_code, 0) << n.output;
    EXPECT_NE(n.output.find("--query nb8 reads binary input only"), std::string::npos) << n.output;
  }
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// The records the followed files' workers last said they had read, in all.
uint64_t files_caught_up(const std::string& output) {
  return sluice::testing::sum_of_latest(output, R"(caught up with (\S+): ([0-9]+) records read)");
}

// --follow: every worker follows its own CSV file. The job reads the first
// half of each file and says it caught up; the rest is appended while it
// runs, in two writes whose first ends in the middle of a line (which waits
// for its end), and read too; SIGTERM to sluice run ends each worker's
// input at its file's end and the job finishes. Records, rows, checksum and
// late counts equal the bounded run's over the whole files (a generated
// input with disorder and late records). A missing file fails every rank,
// naming it; several workers cannot share one followed file.
TEST_F(FileInputTest, FollowedFilesAreReadAsTheyGrowUntilSigterm) {
  const std::vector<std::string> base = followed_query();
  const ProcessResult g = write_csv_input(base);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  ASSERT_NE(json_field(g.output, "late"), "{}") << "the input should have late records";
  std::vector<std::string> rests;
  uint64_t first = 0, total = 0;
  for (int w = 0; w < 4; ++w) {
    std::ifstream in(path("input-" + std::to_string(w) + ".csv"));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l + "\n");
    ASSERT_GT(lines.size(), 10u);
    const size_t half = lines.size() / 2;
    std::ofstream out(path("f-" + std::to_string(w) + ".csv"));
    std::string rest;
    for (size_t i = 0; i <= half; ++i) out << lines[i];
    for (size_t i = half + 1; i < lines.size(); ++i) rest += lines[i];
    rests.push_back(rest);
    first += half;  // the header is not a record
    total += lines.size() - 1;
  }
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--input", path("f-{worker}.csv"), "--follow"});
  sluice::testing::BackgroundJob job(sluice::testing::job_argv(2, 120, "sluice-stream", args));
  ASSERT_TRUE(job.read_until([&](const std::string& o) { return files_caught_up(o) == first; },
                             std::chrono::seconds(60)))
      << job.output();
  for (int w = 0; w < 4; ++w) {
    const std::string& rest = rests[static_cast<size_t>(w)];
    const size_t cut = rest.find('\n') + 3;  // a line and a few bytes of the next
    std::ofstream out(path("f-" + std::to_string(w) + ".csv"), std::ios::app);
    out << rest.substr(0, cut) << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    out << rest.substr(cut) << std::flush;
  }
  ASSERT_TRUE(job.read_until([&](const std::string& o) { return files_caught_up(o) == total; },
                             std::chrono::seconds(60)))
      << job.output();
  ASSERT_TRUE(job.stop()) << job.output();
  const std::string& out = job.output();
  EXPECT_EQ(sluice::testing::count_lines_with(out, "sluice: SIGTERM: stopping"), 2) << out;
  EXPECT_EQ(sluice::testing::count_lines_with(out, "stopping the input from"), 4) << out;
  EXPECT_EQ(sluice::testing::count_lines_with(out, "exited with status"), 0) << out;
  ProcessResult r;
  r.output = out;
  EXPECT_EQ(result(r), result(g)) << out;

  args = base;
  args.insert(args.end(), {"--input", path("missing-{worker}.csv"), "--follow"});
  const ProcessResult missing = run_file_job(2, args);
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_NE(missing.output.find("cannot follow " + path("missing-0.csv")), std::string::npos)
      << missing.output;
  args = base;
  args.insert(args.end(), {"--input", path("f-0.csv"), "--follow"});
  const ProcessResult shared = run_file_job(1, args);
  EXPECT_NE(shared.exit_code, 0) << shared.output;
  EXPECT_NE(shared.output.find("a growing file is followed by one worker"), std::string::npos)
      << shared.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Every row of the CSV files a --csv-out run wrote (FILE.0, FILE.1, ...),
// sorted, without their headers.
std::vector<std::string> csv_rows(const std::string& prefix, int files) {
  std::vector<std::string> rows;
  for (int f = 0; f < files; ++f) {
    std::ifstream in(prefix + "." + std::to_string(f));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) rows.push_back(line);
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// --input-idle-ms: one worker's followed file holds all of its records, the
// other's only its first ten and then grows no more. Without idleness the
// quiet worker's watermark holds every window back: no row is written while
// the job runs. With --input-idle-ms 300 it counts as idle once it has read
// its file and nothing came for 300 ms, and the windows fire while the job
// A followed job killed and recovered in place: every worker follows its
// whole CSV file at a live pace (--throttle), with checkpoints every 200
// ms; the launcher kills rank 1 from outside (unannounced) soon after the
// second checkpoint, while the files are still being read; its restarted
// process and the survivor restore the last complete checkpoint, each
// followed file seeks back to the byte offset and line the checkpoint
// holds, and the job reads on. After SIGTERM the records, rows, checksum
// and late counts are the bounded run's over the whole input: nothing read
// twice into the result, nothing skipped. The same for files read as a
// bounded input.
TEST_F(FileInputTest, AFollowedJobKilledMidReadRecoversFromItsCheckpointsPositions) {
  const std::vector<std::string> base = followed_query();
  const ProcessResult g = write_csv_input(base);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--input", path("input-{worker}.csv"), "--follow", "--throttle", "25000",
                           "--checkpoint-dir", path("state"), "--checkpoint-every", "200",
                           "--recover-within", "30"});
  sluice::testing::BackgroundJob job(sluice::testing::job_argv(
      2, 120, "sluice-stream", args,
      {"--restarts", "1", "--faults-after", "checkpoint 2 complete", "--kill", "1@0.05"}));
  // Every worker's file caught up with again after the recovery.
  const auto recovered_and_caught_up = [](const std::string& o) {
    const size_t at = o.find("recovers from rank 1 was lost");
    if (at == std::string::npos) return false;
    std::set<std::string> files;
    const std::regex line(R"(caught up with (\S+): [0-9]+ records read)");
    const std::string after = o.substr(at);
    for (auto it = std::sregex_iterator(after.begin(), after.end(), line);
         it != std::sregex_iterator(); ++it)
      files.insert((*it)[1]);
    return files.size() == 4;
  };
  ASSERT_TRUE(job.read_until(recovered_and_caught_up, std::chrono::seconds(90))) << job.output();
  ASSERT_TRUE(job.stop()) << job.output();
  const std::string& out = job.output();
  EXPECT_NE(out.find("rank 1 was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(sluice::testing::count_lines_with(out, "exited with status"), 0) << out;
  EXPECT_GE(sluice::testing::json_number(out, "recoveries"), 1u) << out;
  EXPECT_GE(sluice::testing::json_number(out, "restored_from"), 2u) << out;
  EXPECT_GT(sluice::testing::json_number(out, "resumed_at"), 0u) << out;
  ProcessResult r;
  r.output = out;
  EXPECT_EQ(result(r), result(g)) << out;

  // The same with the files read as a bounded input (--input without
  // --follow): the restarted process checks its own files only (the others
  // are recovering: it joins no collective of the job's start).
  std::vector<std::string> bounded = base;
  bounded.insert(bounded.end(), {"--input", path("input-{worker}.csv"), "--throttle", "25000",
                                 "--checkpoint-dir", path("state2"), "--checkpoint-every", "200",
                                 "--recover-within", "30", "--verify"});
  const ProcessResult b = run_process(
      sluice::testing::job_argv(
          2, 90, "sluice-stream", bounded,
          {"--restarts", "1", "--faults-after", "checkpoint 2 complete", "--kill", "1@0.05"}),
      {}, std::chrono::seconds(120));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_GE(sluice::testing::json_number(b.output, "recoveries"), 1u) << b.output;
  EXPECT_EQ(result(b), result(g)) << b.output;
  EXPECT_EQ(json_field(b.output, "verify"), "OK") << b.output;
}

// runs. After SIGTERM both runs have written the same rows.
TEST_F(FileInputTest, AQuietFollowedFileHoldsTheWindowsBackUnlessItCountsAsIdle) {
  const ProcessResult g =
      run_file_job(1, {"--query", "ysb", "--workers", "2", "--records", "200000", "--rate", "5",
                       "--input-csv-dir", dir_.string()});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  std::filesystem::copy_file(path("input-0.csv"), path("f-0.csv"));
  {
    std::ifstream in(path("input-1.csv"));
    std::ofstream out(path("f-1.csv"));
    std::string line;
    for (int i = 0; i < 11 && std::getline(in, line); ++i) out << line << "\n";
  }
  std::vector<std::string> rows[2];
  for (int idle = 0; idle < 2; ++idle) {
    SCOPED_TRACE(idle ? "idle after 300 ms" : "never idle");
    const std::string out = path("out-" + std::to_string(idle) + ".csv");
    std::vector<std::string> args = {"--query",  "ysb",       "--workers",
                                     "2",        "--input",   path("f-{worker}.csv"),
                                     "--follow", "--csv-out", out};
    if (idle) args.insert(args.end(), {"--input-idle-ms", "300"});
    sluice::testing::BackgroundJob job(sluice::testing::job_argv(1, 120, "sluice-stream", args));
    ASSERT_TRUE(job.read_until(
        [](const std::string& o) {
          return sluice::testing::count_lines_with(o, "caught up with") >= 2;
        },
        std::chrono::seconds(60)))
        << job.output();
    // Rows written while it runs: with idleness, wait for the first; without,
    // none may come in a second.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(idle ? 30 : 1);
    while (csv_rows(out, 2).empty() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (idle) {
      EXPECT_FALSE(csv_rows(out, 2).empty()) << "no window fired while the job ran";
    } else {
      EXPECT_TRUE(csv_rows(out, 2).empty()) << "a window fired past the quiet file's watermark";
    }
    ASSERT_TRUE(job.stop()) << job.output();
    EXPECT_EQ(sluice::testing::count_lines_with(job.output(), "exited with status"), 0)
        << job.output();
    rows[idle] = csv_rows(out, 2);
  }
  EXPECT_FALSE(rows[0].empty());
  EXPECT_EQ(rows[0], rows[1]);
}

// A listening TCP socket on 127.0.0.1 (an ephemeral port) that sends
// `text` to the first connection, in two writes split in the middle of a
// line, then closes it.
class LineServer {
 public:
  explicit LineServer(std::string text) : text_(std::move(text)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 1) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      const size_t cut = text_.size() / 2 + 3;
      send_all(c, text_.substr(0, cut));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      send_all(c, text_.substr(cut));
      ::close(c);
    });
  }
  ~LineServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  static void send_all(int fd, const std::string& s) {
    for (size_t at = 0; at < s.size();) {
      const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  std::string text_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// --input-socket: each worker reads the lines a TCP server sends it (the
// query's columns, no header), each stream in two writes split mid-line,
// until the server closes the connection; records, rows, checksum and late
// counts equal the run over the same records from files. A server that is
// not there fails the job, naming its address; the count of addresses must
// be the count of workers.
TEST_F(FileInputTest, SocketsAreReadUntilTheirSendersCloseThem) {
  const std::vector<std::string> base = {"--query",    "ysb", "--workers", "1",  "--rate", "5",
                                         "--disorder", "400", "--lag",     "50", "--json"};
  std::vector<std::string> gen = base;
  gen.insert(gen.end(), {"--records", "100000", "--input-csv-dir", dir_.string()});
  const ProcessResult g = run_file_job(2, gen);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  std::vector<std::unique_ptr<LineServer>> servers;
  std::string addresses;
  for (int w = 0; w < 2; ++w) {
    std::ifstream in(path("input-" + std::to_string(w) + ".csv"));
    std::string line, text;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      // The file's columns are worker,seq, then the query's.
      text += line.substr(line.find(',', line.find(',') + 1) + 1) + "\n";
    }
    servers.push_back(std::make_unique<LineServer>(text));
    addresses += (w ? "," : "") + servers.back()->address();
  }
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--input-socket", addresses});
  const ProcessResult r = run_file_job(2, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "ended (the sender closed it)"), 2)
      << r.output;
  EXPECT_EQ(result(r), result(g)) << r.output;
  servers.clear();

  const ProcessResult refused = run_file_job(2, args);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("cannot connect to 127.0.0.1:"), std::string::npos)
      << refused.output;
  args = base;
  args.insert(args.end(), {"--input-socket", "127.0.0.1:1"});
  const ProcessResult count = run_file_job(2, args);
  EXPECT_NE(count.exit_code, 0) << count.output;
  EXPECT_NE(count.output.find("--input-socket names 1 address(es) for 2 workers"),
            std::string::npos)
      << count.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

}  // namespace
