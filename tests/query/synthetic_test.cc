// sluice-query synthetic through `sluice run`: every run's count and
// checksum must equal the single-process computation (rank 0 checks and
// prints "verify: OK"; the test also checks the count against P x rows and
// that both exchanges delivered every row exactly once), over 1, 2 and 4
// processes x 1 and 2 workers, with the sluice and the sockets exchange.
// The transport comes from SLUICE_TRANSPORT (CTest runs this suite once
// with shm and once with ofi). A process the launcher kills fails the query
// on the others, which name it, and leaves nothing in /dev/shm.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

ProcessResult run_query(int processes, std::vector<std::string> args,
                        const std::string& program = "sluice-query",
                        std::vector<std::string> launcher = {}) {
  return run_process(sluice::testing::job_argv(processes, 90, program, args, launcher), {},
                     std::chrono::seconds(120));
}

struct Case {
  int processes;
  int threads;
  std::string exchange;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.processes << "x" << c.threads << "_" << c.exchange;
}

class SyntheticTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyntheticTest, CountAndChecksumEqualTheSingleProcessComputation) {
  const Case c = GetParam();
  const uint64_t rows = 30000;
  const ProcessResult r =
      run_query(c.processes, {"synthetic", "--json", "--threads", std::to_string(c.threads),
                              "--rows", std::to_string(rows), "--exchange", c.exchange});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 1) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  const uint64_t all = rows * c.processes;
  EXPECT_EQ(json_field(r.output, "count"), std::to_string(all)) << r.output;
  EXPECT_EQ(json_field(r.output, "count"), json_field(r.output, "reference_count")) << r.output;
  EXPECT_EQ(json_field(r.output, "checksum"), json_field(r.output, "reference_checksum"))
      << r.output;
  EXPECT_FALSE(json_field(r.output, "checksum").empty()) << r.output;
  // Every row crossed each of the two exchanges exactly once, 8 bytes a row.
  EXPECT_EQ(json_field(r.output, "rows_exchanged"), std::to_string(2 * all)) << r.output;
  EXPECT_EQ(json_field(r.output, "bytes_exchanged"), std::to_string(16 * all)) << r.output;
  EXPECT_EQ(json_field(r.output, "exchange"), c.exchange) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* x : {"sluice", "sockets"})
    for (int p : {1, 2, 4})
      for (int t : {1, 2}) v.push_back({p, t, x});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllShapes, SyntheticTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           std::ostringstream s;
                           s << info.param;
                           return s.str();
                         });

TEST(SyntheticSweepTest, EveryBatchSizeOfASweepVerifies) {
  for (const char* x : {"sluice", "sockets"}) {
    const ProcessResult r = run_query(2, {"synthetic", "--threads", "2", "--rows", "20000",
                                          "--batch-bytes", "512,4096,65536", "--exchange", x});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 3) << r.output;
    for (const char* b :
         {"batches of 512 bytes", "batches of 4096 bytes", "batches of 65536 bytes"})
      EXPECT_EQ(sluice::testing::count_lines_with(r.output, b), 1) << r.output;
  }
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Rings of two 512-byte segments: pushes meet full rings all the time, so
// workers keep delivering their inputs from inside push (the handlers push
// into the other exchange in turn) instead of blocking each other.
TEST(SyntheticBackPressureTest, TinyRingsStillDeliverEveryRowOnce) {
  const ProcessResult r = run_query(4, {"synthetic", "--json", "--threads", "2", "--rows", "100000",
                                        "--ring-segments", "2", "--batch-bytes", "512"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(json_field(r.output, "count"), "400000") << r.output;
  EXPECT_EQ(json_field(r.output, "rows_exchanged"), "800000") << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(SyntheticOptionsTest, BadOptionsAreNamed) {
  const ProcessResult r = run_process(
      {sluice::testing::bin("sluice-query"), "synthetic", "--exchange", "carrier-pigeon"}, {},
      std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--exchange is sluice, sockets or none, not 'carrier-pigeon'"),
            std::string::npos)
      << r.output;
  const ProcessResult b =
      run_process({sluice::testing::bin("sluice-query"), "synthetic", "--batch-bytes", "1000"}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_NE(b.output.find("multiples of 64"), std::string::npos) << b.output;
  const ProcessResult n =
      run_process({sluice::testing::bin("sluice-query"), "tpcc", "q3", "--exchange", "none"}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(n.exit_code, 2) << n.output;
  EXPECT_NE(n.output.find("--exchange none is for synthetic only"), std::string::npos) << n.output;
}

TEST(SyntheticOptionsTest, HelpListsTheCommandsAndEveryFlag) {
  const ProcessResult r =
      run_process({sluice::testing::bin("sluice-query"), "--help"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* word :
       {"synthetic", "tpcc", "tpcc-export", "--threads", "--rows", "--batch-bytes",
        "--ring-segments", "--exchange", "--warehouses", "--seed", "--every-amount", "--dir",
        "--input", "--json", "--transport"}) {
    EXPECT_NE(r.output.find(word), std::string::npos) << word << "\n" << r.output;
  }
  const ProcessResult tpcc = run_process({sluice::testing::bin("sluice-query"), "tpcc", "--help"},
                                         {}, std::chrono::seconds(30));
  EXPECT_EQ(tpcc.exit_code, 0) << tpcc.output;
  EXPECT_NE(tpcc.output.find("q1, q2 or q3"), std::string::npos) << tpcc.output;
}

// The compute-only baseline: the same operators with no exchange give the
// same count and checksum, and exchange nothing.
TEST(SyntheticComputeOnlyTest, NoExchangeGivesTheSameResultAndMovesNothing) {
  const ProcessResult r = run_query(
      2, {"synthetic", "--json", "--threads", "2", "--rows", "100000", "--exchange", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(json_field(r.output, "count"), "200000") << r.output;
  EXPECT_EQ(json_field(r.output, "checksum"), json_field(r.output, "reference_checksum"))
      << r.output;
  EXPECT_EQ(json_field(r.output, "rows_exchanged"), "0") << r.output;
  EXPECT_EQ(json_field(r.output, "exchange"), "none") << r.output;
}

// The launcher kills process 1 (SIGKILL, `sluice run --kill`; no process is
// told) in the middle of the query: the job fails, each survivor names rank
// 1 as the cause instead of hanging or naming the echoes of its loss, and
// nothing is left in /dev/shm. The kill comes 1 s after the ranks' workers
// started together (the line sluice-query prints there, --faults-after),
// whatever set-up took; 100 M rows per process keep the query running
// about 10 s over shm (30 s over ofi) after that.
void expect_clean_failure_after_kill(const std::string& exchange) {
  const std::string kill = "1@1";
  const ProcessResult r = run_query(
      3, {"synthetic", "--threads", "2", "--rows", "100000000", "--exchange", exchange},
      "sluice-query", {"--grace", "20", "--faults-after", "synthetic.0 running", "--kill", kill});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "injecting --kill " + kill), 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  // Each survivor names rank 1 as the root cause: mostly as "query failed:
  // rank 1 was lost", or without the "query failed" where a loaded machine
  // was still setting up the flows when the kill came.
  for (const std::string rank : {"0", "2"}) {
    EXPECT_EQ(
        sluice::testing::count_lines_with_all(
            r.output, {"[" + rank + "] sluice-query: rank " + rank + ": ", "rank 1 was lost: "}),
        1)
        << r.output;
  }
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "verify: OK"), 0) << r.output;
  EXPECT_LT(r.seconds, 60) << "the job should end soon after the kill, not at its timeout";
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(SyntheticFaultTest, ProcessKilledMidQueryFailsTheQueryNamingIt) {
  expect_clean_failure_after_kill("sluice");
}

TEST(SyntheticFaultTest, ProcessKilledMidQueryFailsTheSocketsQueryToo) {
  expect_clean_failure_after_kill("sockets");
}

}  // namespace
