// sluice-kv run through `sluice run`: Multi-Paxos or NOPaxos replicas and
// clients as the ranks of one job, over sluice flows. Rank 0 checks the job end to end
// (equal digests and applied logs on all replicas, every client operation
// completed and in the log exactly once, the log a linearization of the
// clients' history); this test asserts that it said so, that the counts it
// printed are the ones the options imply, and that nothing is left in
// /dev/shm. The transport comes from SLUICE_TRANSPORT (CTest runs this suite
// with shm and with ofi).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::ProcessResult;
using sluice::testing::run_process;

ProcessResult run_kv(int ranks, std::vector<std::string> args,
                     const std::string& program = "sluice-kv") {
  return run_process(sluice::testing::job_argv(ranks, 100, program, args), {},
                     std::chrono::seconds(130));
}

// `failover`: the replicas must have ended in a later view than the first.
void expect_clean_job(const ProcessResult& r, int replicas, int clients, int ops,
                      bool failover = false) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                r.output,
                "job: every operation completed exactly once; replicas identical; history "
                "linearizable"),
            1)
      << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  const int total = clients * ops;
  EXPECT_EQ(sluice::testing::count_lines_with(
                r.output, "clients: " + std::to_string(clients) + " x " + std::to_string(ops) +
                              " operations completed (" + std::to_string(total) + " in all"),
            1)
      << r.output;
  EXPECT_EQ(
      sluice::testing::count_lines_with(r.output, std::to_string(total) + " distinct operations"),
      1)
      << r.output;
  // One line per replica, all with the same digest.
  std::regex line("replica [0-9]+: applied [0-9]+ entries, digest ([0-9a-f]+), view ([0-9]+)");
  std::set<std::string> digests;
  int lines = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
    digests.insert((*it)[1].str());
    ++lines;
    if (failover) {
      EXPECT_NE((*it)[2].str(), "0") << "no view change happened\n" << r.output;
    }
  }
  EXPECT_EQ(lines, replicas) << r.output;
  EXPECT_EQ(digests.size(), 1u) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(KvJobTest, ThreeReplicasAndTwoClientsAgreeOnManyKeys) {
  expect_clean_job(run_kv(5, {"run", "--ops", "300", "--keys", "50"}), 3, 2, 300);
}

TEST(KvJobTest, FiveReplicasAndTwoClientsOnOneContendedKey) {
  expect_clean_job(run_kv(7, {"run", "--replicas", "5", "--ops", "150", "--keys", "1"}), 5, 2, 150);
}

TEST(KvJobTest, OneReplicaIsAValidDegenerateCluster) {
  expect_clean_job(run_kv(3, {"run", "--replicas", "1", "--ops", "200"}), 1, 2, 200);
}

TEST(KvJobTest, NoPaxosOverTheOrderedReplicateFlowAgreesOnManyKeys) {
  expect_clean_job(run_kv(5, {"run", "--protocol", "nopaxos", "--ops", "300", "--keys", "50"}), 3,
                   2, 300);
}

TEST(KvJobTest, NoPaxosWithFiveReplicasAndThreeClientsOnOneKey) {
  expect_clean_job(
      run_kv(8, {"run", "--protocol", "nopaxos", "--replicas", "5", "--ops", "100", "--keys", "1"}),
      5, 3, 100);
}

TEST(KvJobTest, LongRunNoPaxosKeepsEveryMessageWithinASegment) {
  // 3000 log entries: far more than one message may carry, so followers
  // must be synchronized in bounded chunks.
  expect_clean_job(run_kv(5, {"run", "--protocol", "nopaxos", "--ops", "1500", "--keys", "100"}), 3,
                   2, 1500);
}

// The first leader stops for 2.5 s, past the 0.5 s election timeout, while
// the clients keep going: the others elect a new leader, and the old one
// comes back as a follower and catches up. (Test builds only:
// --test-stall-leader-ms.)
std::vector<std::string> stall_args(const std::string& protocol) {
  return {"run",    "--protocol",
          protocol, "--ops",
          "300",    "--election-timeout-ms",
          "500",    "--retry-ms",
          "500",    "--test-stall-leader-ms",
          "2500",   "--test-stall-after",
          "150"};
}

TEST(KvJobTest, MultiPaxosReplacesALeaderStalledPastTheElectionTimeout) {
  ProcessResult r = run_kv(5, stall_args("multipaxos"), "sluice-kv-test-hooks");
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "test hook: leader rank 0 stalls"), 1)
      << r.output;
  expect_clean_job(r, 3, 2, 300, /*failover=*/true);
}

TEST(KvJobTest, NoPaxosReplacesALeaderStalledPastTheViewChangeTimeout) {
  ProcessResult r = run_kv(5, stall_args("nopaxos"), "sluice-kv-test-hooks");
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "test hook: leader rank 0 stalls"), 1)
      << r.output;
  expect_clean_job(r, 3, 2, 300, /*failover=*/true);
}

TEST(KvJobTest, TooFewRanksForTheReplicasIsAClearError) {
  ProcessResult r = run_kv(3, {"run", "--replicas", "3"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(sluice::testing::count_lines_with(r.output, "at least one more rank for a client"), 1)
      << r.output;
}

}  // namespace
