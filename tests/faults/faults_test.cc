// Regression tests for the reliability review's defects (issue 10) in real
// processes, over the transport the environment names (CTest runs this file
// over shm and over ofi). Every scenario is bounded: a hang fails the test
// through the launcher's --timeout instead of stalling the suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::over_ofi;

testing::ProcessResult run_job(int ranks, std::vector<std::string> args,
                               std::map<std::string, std::string> env = {}, int timeout_s = 90,
                               int grace_s = 30, std::vector<std::string> launcher = {}) {
  launcher.insert(launcher.begin(), {"--grace", std::to_string(grace_s)});
  return testing::run_process(
      testing::job_argv(ranks, timeout_s, "sluice-fault-worker", args, launcher), env,
      std::chrono::seconds(timeout_s + grace_s + 30));
}

// The launcher's fault at rank `victim`'s mark ("AT rank R record K", which
// every rank of the scenario prints): `--kill R@0`, or with `stop` a
// `--stop` long enough that the peer timeout finds it first. No rank is
// told which rank or when.
std::vector<std::string> fault_at_mark(int victim, bool stop = false) {
  return testing::fault_at_line("AT rank " + std::to_string(victim) + " record", victim, 0, stop);
}

// (rank, milliseconds, error) of every "LOST" line.
struct Lost {
  int rank;
  double ms;
  std::string error;
};
std::vector<Lost> lost_lines(const std::string& output) {
  std::vector<Lost> out;
  const std::regex re(R"(^\[(\d+)\] LOST (\d+) (.*)$)");
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back({std::stoi(m[1]), std::stod(m[2]), m[3]});
  }
  return out;
}

// `survivors` LOST lines, and at least one names `who` (a survivor's push
// may instead fail on another survivor that gave the flow up first).
void expect_lost_lines_name(const std::string& output, size_t survivors, const std::string& who) {
  const std::vector<Lost> lines = lost_lines(output);
  EXPECT_EQ(lines.size(), survivors) << output;
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const Lost& l) {
    return l.error.find(who) != std::string::npos;
  })) << output;
}

void expect_no_leftovers(const testing::ProcessResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Items 2 and 11: a rank that pushes, closes with a blocking close() and only
// then consumes, on one thread, hung over ofi (the first write to a peer
// waits until that peer drives its endpoint). Now every connection is made at
// declare, and a full provider queue parks instead of spinning.
TEST(SingleThreadTest, PushCloseThenConsumeOnOneThreadCompletes) {
  auto r = run_job(2, {"--scenario", "single-thread", "--n", "1"});
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 2 records"), 1) << r.output;
}

TEST(SingleThreadTest, TryPushInLatencyModeNeverWaitsOnThePeer) {
  auto r = run_job(3, {"--scenario", "single-thread", "--n", "3000", "--try", "--latency"});
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 9000 records"), 1) << r.output;
}

TEST(SingleThreadTest, ProviderQueueFullIsRetriedWithoutLossOrDuplicates) {
  if (!over_ofi()) GTEST_SKIP() << "the provider-queue hook exists on the ofi transport only";
  auto r = run_job(3, {"--scenario", "single-thread", "--n", "3000", "--try", "--latency"},
                   {{"SLUICE_TEST_OFI_EAGAIN_EVERY", "3"}});
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 9000 records"), 1) << r.output;
  // Blocking pushes that fit the rings (nobody consumes until close()).
  r = run_job(2, {"--scenario", "single-thread", "--n", "2000"},
              {{"SLUICE_TEST_OFI_EAGAIN_EVERY", "2"}});
  expect_no_leftovers(r);
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 4000 records"), 1) << r.output;
}

// A Worker flushing toward a target whose provider queue stays full
// (every post refused; 10 records, less than a segment, so that the
// flush is the first post) when its rank is killed from outside: the
// flush returns PeerLost naming the rank, where it retried for ever (a
// Worker polls with a past deadline, which post_range looked at before
// the loss; the hang showed in sluice-stream --elastic over ofi).
TEST(SingleThreadTest, AWorkerWaitingOnAFullProviderQueueSeesItsTargetsLoss) {
  if (!over_ofi()) GTEST_SKIP() << "the provider-queue hook exists on the ofi transport only";
  auto r = run_job(2, {"--scenario", "worker-lost-target", "--n", "10"},
                   {{"SLUICE_TEST_OFI_EAGAIN_EVERY", "1"}}, 60, 30,
                   {"--keep-going", "--faults-after", "TARGET READY", "--kill", "1@0.5"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] WORKER PeerLost"), 1) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Minor item: a close that waits for delivery, after which the process may
// exit without the destructor's linger and nothing is lost.
TEST(SingleThreadTest, CloseAndWaitReturnsOnceEverythingIsDelivered) {
  auto r = run_job(2, {"--scenario", "close-wait", "--n", "50000"});
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "DELIVERED 50000"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 50000 records"), 1) << r.output;
}

// Item 1: losing the target that leads the shared staging lane (ofi) must
// not lose or overwrite the records of the other targets.
// A source that closes and is destroyed while its target still has much to
// take, its thread held 100 ms before its endpoint closes: over tcp, closing
// then (while the target still sends it credit) resets the connection, which
// can throw away what the target had not yet taken. The source now stays
// until each target confirms that everything arrived (TcpCloseTest in
// tests/multihost counts the resets).
TEST(SingleThreadTest, ASourceDestroyedBeforeItsSlowTargetHasAllStillDeliversIt) {
  auto r = run_job(2, {"--scenario", "slow-target", "--n", "200000"},
                   {{"SLUICE_TEST_OFI_CLOSE_DELAY_MS", "100"}}, 60);
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 200000 records"), 1) << r.output;
}

TEST(ReplicateLossTest, LosingOneTargetLosesNothingForTheOthers) {
  auto r = run_job(3, {"--scenario", "replicate-lead", "--n", "20000", "--k", "300"}, {}, 90, 30,
                   fault_at_mark(1));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] VERIFIED rank 2 got all 20000 records"), 1)
      << r.output;
  // The source goes on, and close() names the lost target and only it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("SOURCE close=PeerLost (.*)"))) << r.output;
  EXPECT_NE(m[1].str().find("target (1,0)"), std::string::npos) << m[1];
  EXPECT_EQ(m[1].str().find("target (2,0)"), std::string::npos) << m[1];
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Items 9 and 10: the README's pattern sees a killed or stopped rank through
// its non-blocking calls, within the peer timeout (1 s here).
void expect_survivors_report(const testing::ProcessResult& r, int survivors, double bound_ms) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  int reported = 0;
  for (const Lost& l : lost_lines(r.output)) {
    if (l.rank == 2) continue;  // the victim, resumed (see the standalone test)
    ++reported;
    EXPECT_NE(l.error.find("rank 2"), std::string::npos) << l.error;
    // The data plane also hands the lost rank over as a value (lost_peer()).
    EXPECT_EQ(l.error.rfind("[lost_peer 2] ", 0), 0u) << l.error;
    EXPECT_LT(l.ms, bound_ms) << "rank " << l.rank << ": " << l.error;
  }
  EXPECT_EQ(reported, survivors) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(ReadmePatternTest, SurvivorsReportAKilledRank) {
  auto r = run_job(4, {"--scenario", "readme", "--n", "200000", "--k", "20000"},
                   {{"SLUICE_PEER_TIMEOUT_MS", "1000"}}, 90, 30, fault_at_mark(2));
  expect_survivors_report(r, 3, 6000);
}

// Survivors rebuild their flow among the members of the next view and go on
// exactly once (the pattern apps/kv follows by hand); the launcher kills
// rank 2 (no rank is told which or when) and lets them go on (--keep-going).
TEST(RebuildTest, SurvivorsRebuildTheFlowAmongTheNextViewAndDeliverExactlyOnce) {
  auto r = testing::run_process(
      testing::job_argv(4, 90, "sluice-fault-worker", {"--scenario", "rebuild", "--n", "20000"},
                        {"--keep-going", "--kill", "2@1"}),
      {}, std::chrono::seconds(150));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;  // an injected death does not count against it
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "LIVE 0 1 3 (view "), 3) << r.output;
  // Each survivor's push failed (on rank 2's ring, or on a survivor that
  // went on first); the first to fail named rank 2.
  expect_lost_lines_name(r.output, 3, "rank 2");
  EXPECT_EQ(testing::count_lines_with(
                r.output, "[0] VERIFIED 60000 records on the flow rebuilt among 3 ranks"),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A rank killed from outside is started again (sluice run --restarts 1) and
// rejoins as a new incarnation: the old flow stays failed for the survivors
// although the rank is alive again, and a new flow among all ranks, the new
// process included, delivers exactly once; barrier counts carry over.
TEST(RejoinTest, AKilledRankIsStartedAgainAndJoinsANewFlowAsIncarnationOne) {
  auto r = testing::run_process(
      testing::job_argv(3, 90, "sluice-fault-worker", {"--scenario", "rejoin", "--n", "20000"},
                        {"--restarts", "1", "--kill", "2@1"}),
      {}, std::chrono::seconds(150));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;  // the restarted failure does not count
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "sluice run: rank 2 was killed by signal 9 (SIGKILL)"), 1)
      << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "sluice run: starting rank 2 again (restart 1 of 1)"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] RESTARTED as incarnation 1"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "REJOINED rank 2 as incarnation 1"), 2) << r.output;
  // Once the rank was back, the survivors' old flow still failed: it
  // belongs to incarnation 0.
  // (Every survivor that got to push; a kill during the set-up leaves none.)
  EXPECT_EQ(testing::count_lines_with(r.output, "OLD FLOW PeerLost after the rejoin"),
            testing::count_lines_with(r.output, "[0] PUSHING") +
                testing::count_lines_with(r.output, "[1] PUSHING"))
      << r.output;
  expect_lost_lines_name(r.output, 2, "rank 2");
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] VERIFIED 60000 records with every rank back"),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Issue 11: the ends of a combiner flow (and a Worker's combiner input)
// hand the lost rank over as a value, as a flow's Source and Target do.
TEST(CombinerLossTest, SurvivorsOfACombinerFlowNameTheKilledRank) {
  auto r = run_job(4, {"--scenario", "combiner", "--n", "200000", "--k", "20000"},
                   {{"SLUICE_PEER_TIMEOUT_MS", "1000"}}, 90, 30, fault_at_mark(2));
  expect_survivors_report(r, 3, 6000);
}

TEST(ReadmePatternTest, SurvivorsReportAStoppedRank) {
  auto r = run_job(4, {"--scenario", "readme", "--n", "200000", "--k", "20000"},
                   {{"SLUICE_PEER_TIMEOUT_MS", "1000"}}, 90, 30, fault_at_mark(2, /*stop=*/true));
  expect_survivors_report(r, 3, 6000);
}

// The same without a launcher (a standalone registry, as across hosts):
// nothing ends the survivors but their own kPeerLost.
// The script kills (or stops) rank 2 at its mark from outside.
testing::ProcessResult run_standalone(std::vector<std::string> args, bool stop = false,
                                      std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {
      std::string(SLUICE_SOURCE_DIR) + "/tests/faults/standalone_job.sh", bin("sluice"),
      bin("sluice-fault-worker"), stop ? "STOP" : "KILL"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("SLUICE_PEER_TIMEOUT_MS", "1000");
  return testing::run_process(argv, env, std::chrono::seconds(120));
}

TEST(ReadmePatternTest, SurvivorsReportAKilledRankWithAStandaloneRegistry) {
  auto r = run_standalone({"--scenario", "readme", "--n", "200000", "--k", "20000"});
  expect_survivors_report(r, 3, 6000);
}

TEST(ReadmePatternTest, SurvivorsReportAStoppedRankWithAStandaloneRegistry) {
  auto r = run_standalone({"--scenario", "readme", "--n", "200000", "--k", "20000"},
                          /*stop=*/true);
  expect_survivors_report(r, 3, 6000);
  // The survivors on its host fenced it (killed it) before they moved to
  // the view without it: resumed, it runs no more.
  EXPECT_GE(testing::count_lines_with(r.output, "fenced rank 2 (incarnation 0"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] LOST"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "victim still running"), 0) << r.output;
}

// `sluice registry --peer-timeout-ms` sets the registry's limit, over
// SLUICE_PEER_TIMEOUT_MS (1000 here): the survivors hear of the stopped
// rank as silent for 700 ms.
TEST(ReadmePatternTest, TheStandaloneRegistrysPeerTimeoutFlagDecidesWhenARankIsLost) {
  auto r = run_standalone({"--scenario", "readme", "--n", "200000", "--k", "20000"},
                          /*stop=*/true, {{"REGISTRY_ARGS", "--peer-timeout-ms 700"}});
  expect_survivors_report(r, 3, 6000);
  EXPECT_GE(testing::count_lines_with(r.output, "declared lost: no heartbeat for 700 ms"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "no heartbeat for 1000 ms"), 0) << r.output;
}

// With fencing off (SLUICE_FENCE=0), a stopped rank resumed after the
// others gave up on it must find out by itself (it spun in try_push for
// good before), not deliver as if alive.
TEST(ReadmePatternTest, AStoppedRankNotFencedFindsOutItsLossWhenResumed) {
  auto r = run_standalone({"--scenario", "readme", "--n", "200000", "--k", "20000"},
                          /*stop=*/true, {{"SLUICE_FENCE", "0"}});
  expect_survivors_report(r, 3, 6000);
  EXPECT_EQ(testing::count_lines_with(r.output, "fenced rank"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] LOST"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "victim still running"), 0) << r.output;
}

// Fencing (issue 37): a stopped rank that the registry declared lost writes
// nothing into a survivor's memory once the survivors are in the view
// without it. Ranks 1-3 write rising numbers into their words of rank 0's
// region; the script stops rank 2 at its mark (no rank is told) and resumes
// it as soon as rank 0 says it is in the view without it; rank 0 watches
// rank 2's word for 3 s.
TEST(FenceTest, AStoppedRankResumedAfterTheViewWritesNothingMore) {
  auto r = run_standalone({"--scenario", "fence", "--k", "2000"}, /*stop=*/true,
                          {{"RESUME_AT", "without rank 2"}});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "SIGSTOP to rank 2 at its mark"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "SIGCONT to rank 2"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] VIEW 1 without rank 2"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "rank 2's process had exited when a rank printed"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] WORD HELD: rank 2's word stayed"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FENCE BROKEN"), 0) << r.output;
  EXPECT_GE(testing::count_lines_with(r.output, "fenced rank 2 (incarnation 0"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "victim still running"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The fence scenario with the host's kill off (SLUICE_FENCE=0): rank 2's
// process still exists when rank 0 is in the view without it, and is
// resumed then.
testing::ProcessResult run_fence_unkilled() {
  auto r = run_standalone({"--scenario", "fence", "--k", "2000"}, /*stop=*/true,
                          {{"RESUME_AT", "without rank 2"}, {"SLUICE_FENCE", "0"}});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] VIEW 1 without rank 2"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output, "rank 2's process still existed (state T) when a rank printed"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "SIGCONT to rank 2"), 1) << r.output;
  return r;
}

// Its negative control: with fencing off, rank 2's process still exists
// when rank 0 is in the view without it, and is resumed; over shm, whether
// one of its writes then lands first ("FENCE BROKEN", as most runs on an
// idle machine show) or its control thread first finds the registry gone
// (its next write then fails) is a race between its own threads, so only
// the first is asserted (over ofi the region refuses it: the next test).
TEST(FenceTest, WithoutFencingTheStoppedRankStillExistsAtTheView) {
  const testing::ProcessResult r = run_fence_unkilled();
  EXPECT_EQ(testing::count_lines_with(r.output, "fenced rank"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Over ofi (its variants only: shm peers map the memory) the region itself
// refuses a rank the job declared lost: before rank 0 moves to the view
// without rank 2, its service closes rank 2's registration of the region
// and answers its HELLO FENCED. With the host's kill off (SLUICE_FENCE=0),
// rank 2's process still exists when it is resumed, and none of its writes
// lands after the view: its next one fails, naming the fence (by its key
// refused, then its HELLO; over the message path by its request refused).
TEST(FenceTest, OverOfiTheRegionRefusesAStoppedRankThatStillRuns) {
  const testing::ProcessResult r = run_fence_unkilled();
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] WORD HELD: rank 2's word stayed"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FENCE BROKEN"), 0) << r.output;
  // Refused by the owner: its HELLO answered FENCED, or its write failed in
  // the provider (its key closed), whichever rank 2's threads met first
  // (its control thread may learn of its loss first and word the error).
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"[2] FAILED: write: ", "the job declared this rank lost"}) +
                testing::count_lines_with_all(
                    r.output, {"[2] FAILED: write: ", "a libfabric operation failed"}),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Fencing of flows (issue 37): ranks 1-3 push records stamped with the
// machine's steady clock into a flow to rank 0, one segment each; the
// script stops rank 2 at its mark (no rank is told) and resumes it as soon
// as rank 0 is in the view without it; rank 0 takes nothing from about
// the K-th record of every source until 1 s after that view, then drains
// the flow.
// No record rank 2 pushed after the view may come out, every source's come
// in order, once each. Over shm the host's kill is the fence (rank 2's
// process has exited at the view). Over ofi the kill is off
// (SLUICE_FENCE=0: a process on another host is beyond it), the resumed
// process still runs, and the target refuses whatever arrives from it once
// its rank is declared lost (without that, 2 of 3 runs delivered records
// it pushed 15 ms after the view, and every run named rank 0 as the lost
// peer, as the resumed process's abort blamed it).
testing::ProcessResult run_flow_fence(bool ordered) {
  std::vector<std::string> args = {"--scenario", "flow-fence", "--k", "1000"};
  if (ordered) args.push_back("--ordered");
  std::map<std::string, std::string> env = {{"RESUME_AT", "without rank 2"}};
  if (over_ofi()) env.emplace("SLUICE_FENCE", "0");
  auto r = run_standalone(args, /*stop=*/true, env);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "SIGSTOP to rank 2 at its mark"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] VIEW 1 without rank 2"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] FLOW HELD"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FENCE BROKEN"), 0) << r.output;
  for (const char* rank : {"[0] FAILED", "[1] FAILED", "[3] FAILED"})
    EXPECT_EQ(testing::count_lines_with(r.output, rank), 0) << r.output;
  if (over_ofi()) {
    EXPECT_EQ(testing::count_lines_with(
                  r.output, "rank 2's process still existed (state T) when a rank printed"),
              1)
        << r.output;
    // Its data thread mostly sends before its control thread learns that
    // it is lost (rank 0 logs "refused what source (2,0) ... sent after
    // the job declared its rank lost"); in about 1 run of 25 here the
    // control thread is first and it sends nothing more.
    EXPECT_EQ(testing::count_lines_with(r.output, "[2] PUSH ENDED"), 1) << r.output;
  } else {
    EXPECT_EQ(
        testing::count_lines_with(r.output, "rank 2's process had exited when a rank printed"), 1)
        << r.output;
  }
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
  return r;
}

TEST(FenceTest, AStoppedSourceResumedAfterTheViewHasNothingMoreDelivered) {
  run_flow_fence(/*ordered=*/false);
}

// The same through an ordered flow, whose target goes on without a lost
// source (ofi only: over shm the host's kill fences it as above). The
// sequencer on rank 0 is fenced as a region is: the resumed process takes
// no number (its push fails), and each number it took before but whose
// segment was refused is a gap.
TEST(FenceTest, AStoppedSourceOfAnOrderedFlowIsRefusedItsSegmentsAndNumbers) {
  run_flow_fence(/*ordered=*/true);
}

// Item 9: an endpoint destroyed early is seen by its peer at once, while its
// rank stays alive (before, only the rank's exit ended the wait).
TEST(AbortTest, ASourceLearnsThatItsTargetWasDestroyed) {
  auto r = run_job(2, {"--scenario", "target-abort", "--k", "500"});
  expect_no_leftovers(r);
  auto lost = lost_lines(r.output);
  ASSERT_EQ(lost.size(), 1u) << r.output;
  EXPECT_EQ(lost[0].rank, 0);
  EXPECT_NE(lost[0].error.find("destroyed before the end of the flow"), std::string::npos)
      << lost[0].error;
  EXPECT_LT(lost[0].ms, 4000) << lost[0].error;
}

TEST(AbortTest, ATargetLearnsThatItsSourceWasDestroyedWithoutClose) {
  auto r = run_job(2, {"--scenario", "source-abort", "--k", "500"});
  expect_no_leftovers(r);
  auto lost = lost_lines(r.output);
  ASSERT_EQ(lost.size(), 1u) << r.output;
  EXPECT_EQ(lost[0].rank, 1);
  EXPECT_NE(lost[0].error.find("without close()"), std::string::npos) << lost[0].error;
  EXPECT_LT(lost[0].ms, 4000) << lost[0].error;
}

TEST(AbortTest, ATargetLearnsAtOnceThatItsSourceAborted) {
  auto r = run_job(2, {"--scenario", "source-abort", "--k", "500", "--abort"});
  expect_no_leftovers(r);
  auto lost = lost_lines(r.output);
  ASSERT_EQ(lost.size(), 1u) << r.output;
  EXPECT_EQ(lost[0].rank, 1);
  EXPECT_NE(lost[0].error.find("was aborted"), std::string::npos) << lost[0].error;
  EXPECT_LT(lost[0].ms, 4000) << lost[0].error;
  EXPECT_EQ(testing::count_lines_with(r.output, "SOURCE aborted"), 1) << r.output;
}

// Item 3: a live source that idles while the provider holds back one of its
// numbered batches must never see that batch declared a gap.
TEST(OrderedIdleTest, AnIdleLiveSourceIsNeverAGap) {
  std::map<std::string, std::string> env;
  if (over_ofi()) env["SLUICE_TEST_OFI_EAGAIN_EVERY"] = "3";
  auto r = run_job(3, {"--scenario", "ordered-idle", "--n", "4000"}, env);
  expect_no_leftovers(r);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 8000 records in one order, no gaps"), 1)
      << r.output;
}

// Item 13: a rank that fails in declare and exits is a lost peer to the
// others, whatever moment they reach it (it was a "cannot open the shared
// memory of process N" resource error in some runs).
TEST(DeclareTest, ARankThatExitsDuringDeclareIsReportedLost) {
  for (const char* delay : {"0", "200", "600"}) {
    auto r = run_job(2, {"--scenario", "declare-twice", "--k", delay}, {}, 60, 20);
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "DUPLICATE refused"), 1) << r.output;
    auto lost = lost_lines(r.output);
    ASSERT_EQ(lost.size(), 1u) << r.output;
    EXPECT_EQ(lost[0].rank, 1);
    EXPECT_NE(lost[0].error.find("rank 0"), std::string::npos) << lost[0].error;
  }
}

// Minor item: losing an ordered flow's sequencer owner fails its sources
// alike on shm and ofi (on shm they went on with the dead owner's counter).
TEST(OrderedIdleTest, LosingTheSequencerOwnerFailsTheSourcesOnEveryTransport) {
  auto r = run_job(3, {"--scenario", "sequencer-lost", "--k", "2000"},
                   {{"SLUICE_PEER_TIMEOUT_MS", "1000"}}, 90, 30, fault_at_mark(0));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  auto lost = lost_lines(r.output);
  ASSERT_EQ(lost.size(), 2u) << r.output;
  for (const Lost& l : lost) EXPECT_NE(l.error.find("rank 0"), std::string::npos) << l.error;
}

// Minor item: the ranks of a flow must agree on how each pair is wired.
TEST(DeclareTest, RanksThatDisagreeOnTheTransportAreRefused) {
  if (over_ofi()) GTEST_SKIP() << "the scenario pins the transport itself";
  auto r = run_job(2, {"--scenario", "transport-mismatch"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_GE(testing::count_lines_with(r.output, "REFUSED SpecMismatch"), 1) << r.output;
  EXPECT_GE(testing::count_lines_with(r.output, "transport"), 1) << r.output;
}

// The record type's identity is checked at declare, not only its size.
TEST(DeclareTest, RanksThatDisagreeOnTheRecordTypeAreRefused) {
  auto r = run_job(2, {"--scenario", "type-mismatch"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "REFUSED SpecMismatch"), 2) << r.output;
  EXPECT_GE(testing::count_lines_with(r.output, "record_type"), 1) << r.output;
}

// Item 8: a source that sends in another source's name (a test hook forges
// the index its segments carry) never has a record delivered as the other's,
// and the flow never ends as complete. Where the provider names senders (the
// message path over tcp;ofi_rxm), the target fails the flow at the first
// forged message and names the impostor. Over RMA, tcp;ofi_rxm names no
// writer: a forged completion can only point at the victim's own segments
// (the impostor's key reaches its own area only), whose footers must carry
// the next sequence number, so the victim's records arrive exactly once and
// the impostor's ring never ends (the target's deadline passes, or the
// impostor's rank leaves the job first: its source lost before it closed),
// unless a forged completion comes before the victim's segment, whose
// footer then fails the check (the flow fails, blaming the victim:
// tcp;ofi_rxm cannot say who wrote).
TEST(ImpersonationTest, ASourceSpeakingInAnothersNameIsCaughtAndNothingOfItsIsDelivered) {
  if (!over_ofi()) GTEST_SKIP() << "the impersonation hook exists on the ofi transport only";
  auto r = run_job(3, {"--scenario", "impersonate", "--k", "3000"},
                   {{"SLUICE_TEST_OFI_IMPERSONATE", "2:0"}}, 90);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
  auto lost = lost_lines(r.output);
  ASSERT_EQ(lost.size(), 1u) << r.output;
  EXPECT_EQ(lost[0].rank, 1) << r.output;
  const char* rma = std::getenv("SLUICE_OFI_RMA");
  if (rma != nullptr && std::string(rma) == "0") {
    EXPECT_NE(lost[0].error.find("source (2,0) sent a message in the name of source (0,0)"),
              std::string::npos)
        << lost[0].error;
    EXPECT_NE(lost[0].error.find("[lost_peer 2]"), std::string::npos) << lost[0].error;
  } else {
    // Which depends on whether the victim's segment landed before the
    // forged completion naming it, and on whether the target's deadline
    // passes before the impostor's rank leaves the job.
    const bool never_ended =
        lost[0].error.find("deadline passed, waiting for source (2,0) on rank 2") !=
            std::string::npos ||
        (lost[0].error.find("lost source (2,0) before it closed") != std::string::npos &&
         lost[0].error.find("rank 2 (") != std::string::npos &&
         lost[0].error.find("left the job [lost_peer 2]") != std::string::npos);
    const bool caught =
        lost[0].error.find(
            "from source (0,0) is corrupt (its footer carries another sequence number)") !=
        std::string::npos;
    EXPECT_TRUE(never_ended || caught) << lost[0].error;
  }
}

}  // namespace
}  // namespace sluice
