// sluice-nam's fault tests, through `sluice run`: a compute rank killed,
// stopped, started again or joining, a memory server lost, each from
// outside (the launcher's --kill, --stop, --kill-at, --join; no rank is
// told), checked by the run's own invariant check and counts (see
// nam_test.cc), and their negative controls with --no-recovery. The
// transport comes from SLUICE_TRANSPORT.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "nam_test_util.h"

namespace {

using nam_test::count_lines_with;
using nam_test::count_lines_with_all;
using nam_test::expect_invariants_ok;
using nam_test::json_number;
using nam_test::over_ofi;
using nam_test::ProcessResult;
using nam_test::run_nam;

// ------------------------------------------------------------ faults
//
// The faults come from outside: the launcher kills a rank (sluice run
// --kill RANK@SECONDS, counted from when every rank joined) while the
// clients run, and no rank is told which or when. The runs last --seconds
// (1 ms of think time, so that the clients cannot fill the orders table and
// finish early), long enough that the kill lands in the middle. Where in a
// transaction it lands is up to the scheduler: the recovery of a client
// killed at each delicate point of a commit is tested with the point fixed,
// by rsi_recovery_test.cc (RSI, in one process) and by the 2PC tests below
// that run the test program nam_twopc_kill_program.

// Seconds of a fault test's run, and when the kill comes: over ofi the
// set-up (regions, the 2PC flows) takes seconds of its own, 4 s and more on
// a loaded machine, and the kill must come after it.
std::string fault_seconds() { return over_ofi() ? "6" : "4"; }
std::string kill_at(int rank) { return std::to_string(rank) + "@1"; }
// The launcher's flags for it: the kill comes a second after the clients
// started (the line the first compute rank prints then; no rank knows of
// the fault), and survivors that go on get until the run's end (--seconds)
// and their closing, not only the launcher's default 10 s.
std::vector<std::string> kill_args(int rank) {
  return {"--faults-after", "clients started on every compute rank",
          "--kill",         kill_at(rank),
          "--grace",        "30"};
}

// A fault test's RSI run: 50 products of 32 bytes, `seconds` of 1 ms think
// time, a 500 ms recovery timeout, --json; `more` besides.
std::vector<std::string> fault_run(const std::string& seconds,
                                   const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {
      "--products", "50",   "--record-bytes",        "32",  "--txns", "0", "--seconds", seconds,
      "--think-us", "1000", "--recovery-timeout-ms", "500", "--json"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Rank `rank`'s new process (incarnation 1) ran spare client `id` (any
// free slot if -1: a rank killed while the job starts may find its own
// slot free), and the report counted it; returns its commits.
uint64_t expect_spare_client_ran(const ProcessResult& r, int id = 2, int rank = 2) {
  // (A joiner's lines may come as "[joiner 0]" before the launcher knows its rank.)
  const std::string who =
      "sluice-nam: rank " + std::to_string(rank) + ": incarnation 1 runs spare client ";
  EXPECT_EQ(count_lines_with(
                r.output, id < 0 ? who : who + std::to_string(id) + " for what is left of the run"),
            1)
      << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 1u) << r.output;
  const uint64_t commits = json_number(r.output, "replacement_commits");
  EXPECT_GT(commits, 0u) << r.output;
  return commits;
}

// Each survivor (`ranks`) printed one line naming a lost rank. Mostly the
// kill lands mid-run, and each names rank 1 with `mid_run` (what the run's
// own check says); on a loaded machine still wiring up the flows it names
// the loss as set-up saw it, rank 1 by at least one survivor (another may
// name a memory server that ended because of it first).
// Returns whether the kill landed mid-run.
bool expect_survivors_name_the_loss(const ProcessResult& r, const std::vector<std::string>& ranks,
                                    const std::string& mid_run) {
  int strict = 0;
  for (const std::string& rank : ranks)
    strict += count_lines_with(
        r.output, "[" + rank + "] sluice-nam: rank " + rank + ": rank 1 was lost: " + mid_run);
  if (strict == static_cast<int>(ranks.size())) return true;
  std::printf("the kill landed while the flows were set up\n");
  for (const std::string& rank : ranks) {
    EXPECT_EQ(count_lines_with_all(
                  r.output, {"[" + rank + "] sluice-nam: rank " + rank + ": ", " was lost: "}),
              1)
        << "rank " << rank << "\n"
        << r.output;
  }
  EXPECT_GE(count_lines_with(r.output, ": rank 1 was lost: "), 1) << r.output;
  return false;
}

// The launcher injected the kill, the job ended well within its timeout,
// and nothing is left in /dev/shm.
void expect_killed(const ProcessResult& r, int rank) {
  EXPECT_EQ(
      count_lines_with(r.output, "sluice run: injecting --kill " + std::to_string(rank) + "@"), 1)
      << r.output;
  EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " was killed by signal 9"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 60) << "the job should end soon after the loss\n" << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Client 1 (alone on rank 2) dies with its rank. The survivor's client
// recovers what it left (its pending timestamp after 500 ms of it holding
// the read timestamp back, its locks where it conflicts with them), the
// reporter recovers it in full at the end, the ranks close the run without
// it (they agree on who is left: meet_survivors), and the invariants hold
// with the dead client's orders counted as they are. The killed rank does
// not count against the job (the launcher's --kill): the job passes.
TEST(NamFaultTest, ClientRankKilledMidRunIsRecoveredAndTheInvariantsHold) {
  const ProcessResult r =
      run_nam(3,
              {"--products", "50", "--record-bytes", "32", "--txns", "0", "--seconds",
               fault_seconds(), "--think-us", "1000", "--recovery-timeout-ms", "500", "--json"},
              "sluice-nam", kill_args(2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 2);
  expect_invariants_ok(r);
  // One client died: it is counted once, however many live clients took
  // part in recovering it.
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 1u) << "only the survivor reports\n" << r.output;
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
}

// The negative control of the test above: the same kill with --no-recovery
// fails the run, naming the client the survivor would have recovered, and
// the invariants are never declared OK. (The fault soak's control runs the
// same flag.)
TEST(NamFaultTest, WithRecoveryOffAKilledClientRankFailsTheRunNamingIt) {
  const ProcessResult r = run_nam(
      3,
      {"--products", "50", "--record-bytes", "32", "--txns", "0", "--seconds", fault_seconds(),
       "--think-us", "1000", "--recovery-timeout-ms", "500", "--json", "--no-recovery"},
      "sluice-nam", kill_args(2));
  EXPECT_NE(r.exit_code, 0) << r.output;
  expect_killed(r, 2);
  EXPECT_GE(count_lines_with_all(
                r.output, {"nam: client 1 held timestamp ", "recovery is off (--no-recovery)"}),
            1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "invariants: OK"), 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, " recovered client "), 0) << r.output;
}

// The death at the most delicate place of an RSI commit, with no rank told:
// client 1 (alone on rank 2) kills itself on its 20th commit that has its
// records locked and nothing installed (sluice::kill_point
// "nam-rsi-after-lock", armed by `sluice run --kill-at` in that process
// alone). The survivor recovers what it left: the locks released, the
// commit aborted (its timestamp bit never set); no record stays locked and
// the invariants hold.
TEST(NamFaultTest, AClientKilledBetweenLockingAndInstallingIsRecoveredAndTheInvariantsHold) {
  const ProcessResult r =
      run_nam(3,
              {"--products", "50", "--record-bytes", "32", "--txns", "0", "--seconds",
               fault_seconds(), "--think-us", "1000", "--recovery-timeout-ms", "500", "--json"},
              "sluice-nam", {"--kill-at", "2:nam-rsi-after-lock:20", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(
      count_lines_with(r.output, "[2] sluice: kill point 'nam-rsi-after-lock' reached (pass 20)"),
      1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output,
                             "rank 2 was killed by signal 9 (SIGKILL), at its kill "
                             "point (--kill-at)"),
            1)
      << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// A compute rank killed while the job starts (over ofi its set-up takes
// seconds; 0.3 s in, the memory server is still loading its tables): the
// others go on without it, and the job ends as after a death mid-run.
// Before, the memory server's opening of a liveness flow to that rank failed
// and ended every rank. Over ofi only: over shm the set-up is over in a few
// milliseconds, too short for a kill from outside to aim at.
TEST(NamFaultTest, AComputeRankKilledWhileTheJobStartsIsLeftOut) {
  const ProcessResult r =
      run_nam(3,
              {"--products", "50", "--record-bytes", "32", "--txns", "0", "--seconds", "3",
               "--think-us", "1000", "--recovery-timeout-ms", "500", "--json"},
              "sluice-nam", {"--kill", "1@0.3", "--keep-going", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 1);
  expect_invariants_ok(r);
  EXPECT_EQ(count_lines_with(r.output, " was lost"), 0) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 1u) << "only the survivor reports\n" << r.output;
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
}

// The same kill while the job starts, with the rank started again and a
// spare slot: the new process joins before the others meet to start, and
// they must not wait for it (their meetings are among the job's first
// processes); it claims the spare slot once the run has started and runs a
// client for the rest of it. (Before, the start waited for the new process
// until it gave up after the set-up timeout and exited 1.) Over ofi only,
// as above.
TEST(NamFaultTest, AComputeRankKilledWhileTheJobStartsAndStartedAgainRunsASpareClient) {
  const ProcessResult r =
      run_nam(3, fault_run("3", {"--spare-clients", "1"}), "sluice-nam",
              {"--kill", "2@0.3", "--keep-going", "--restarts", "1", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 2);
  expect_spare_client_ran(r, /*id=*/-1);
  expect_invariants_ok(r);
}

// A client stalled (SIGSTOP from outside, shorter than the peer timeout,
// longer than nam's --recovery-timeout-ms) is taken for dead, recovered
// and fenced by another client; resumed, it stops and counts as a client
// that died, and the job's results and invariants come as after a death
// (before, the fenced client failed its rank and the job ended with "a
// client failed: no results").
TEST(NamFaultTest, AClientStalledPastTheRecoveryTimeoutIsFencedAndCountsAsDied) {
  const std::string at = "2@1";
  const ProcessResult r =
      run_nam(3,
              {"--products", "50", "--record-bytes", "32", "--txns", "0", "--seconds",
               fault_seconds(), "--think-us", "1000", "--recovery-timeout-ms", "500", "--json"},
              "sluice-nam",
              {"--faults-after", "clients started on every compute rank", "--stop", at + ":1.5",
               "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "sluice run: injecting --stop " + at), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "counts as a client that died"), 1) << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 1u) << "the fenced client is not counted\n"
                                                  << r.output;
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
}

// Rank 2's process is killed mid-run, unannounced, and the launcher starts
// it again (--restarts 1). The survivors recover the lost client as above;
// the new process claims the spare client slot (--spare-clients 1, parked
// from the start) and runs a new client in it for what is left of the run.
// The reporter waits for it, counts its commits and checks its orders with
// the others': the invariants hold, and the job passes. Nothing tells any
// rank of the kill: the restarted one only finds itself incarnation 1.
TEST(NamFaultTest, AKilledClientRankStartedAgainRunsASpareClientInItsPlace) {
  std::vector<std::string> launcher = kill_args(2);
  launcher.insert(launcher.end(), {"--restarts", "1"});
  const ProcessResult r =
      run_nam(3, fault_run(fault_seconds(), {"--spare-clients", "1"}), "sluice-nam", launcher);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 2);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: starting rank 2 again (restart 1 of 1)"), 1)
      << r.output;
  const uint64_t spare = expect_spare_client_ran(r);
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 2u) << "the survivor and the spare\n" << r.output;
  EXPECT_GT(json_number(r.output, "commits"), spare) << r.output;
  EXPECT_EQ(
      count_lines_with(r.output, "spare clients: 1 of 1 ran in ranks started again or joined, " +
                                     std::to_string(spare) + " commits"),
      1)
      << r.output;
}

// The same kill and restart without spare slots: the restarted process says
// it has none to run and leaves (its exit status fails the job), and the
// survivor finishes the run as after a plain death.
TEST(NamFaultTest, ARestartedClientRankWithoutSpareSlotsLeavesAndTheOthersFinish) {
  std::vector<std::string> launcher = kill_args(2);
  launcher.insert(launcher.end(), {"--restarts", "1"});
  const ProcessResult r = run_nam(3, fault_run(fault_seconds()), "sluice-nam", launcher);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_killed(r, 2);
  EXPECT_EQ(count_lines_with(r.output,
                             "[2] sluice-nam: rank 2: incarnation 1, new to the running job: "
                             "there is no free client slot to run clients in"),
            1)
      << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 1u) << r.output;
}

// The launcher's flags for an elastic job of 3 ranks that grows to 4: a
// process joins a second after the clients started.
std::vector<std::string> grow_args() {
  return {"--max-ranks", "4", "--faults-after", "clients started on every compute rank",
          "--join",      "1", "--grace",        "30"};
}

// An elastic job (sluice run --max-ranks 4 with 3 ranks: rank 3 is a
// vacancy) grows while it runs: a process joins a second after the clients
// started (--join 1) and takes rank 3. Memory server 0 laid the run out with
// rank 3's client slot free and parked, so nobody waited for it or took it
// for a dead client; the newcomer claims it and runs a client for the rest
// of the run, and the report counts it with the others. No --spare-clients
// and no restart: growing is not a fault. (Before, every rank failed at
// set-up on the vacancy: "key 'host/3' will never be put".)
TEST(NamElasticTest, AProcessThatJoinsTheRunningJobRunsTheClientOfItsVacancy) {
  const ProcessResult r = run_nam(3, fault_run(fault_seconds()), "sluice-nam", grow_args());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "joined the running job as rank 3"), 1) << r.output;
  const uint64_t joined = expect_spare_client_ran(r, /*id=*/2, /*rank=*/3);
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients"), 3u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 0u)
      << "the vacancy's slot was taken for a dead client\n"
      << r.output;
  EXPECT_GT(json_number(r.output, "commits"), joined) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "3 clients on 3 compute ranks"), 1) << r.output;
}

// An elastic job (sluice run -n 3 --max-ranks 4) that nobody joins: rank
// 3 stays a vacancy to the end, its client slot is closed unused, and the
// report names the transport over the ranks in the job. (Before, the
// reporter asked which host every rank number is on, the vacancy too, and
// failed: "key 'host/3' will never be put: its owner rank 3 is a vacancy".)
TEST(NamElasticTest, AVacancyNobodyJoinsIsPassedOverByTheReport) {
  const ProcessResult r =
      run_nam(3, fault_run("2"), "sluice-nam", {"--max-ranks", "4", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "2 clients on 2 compute ranks"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "spare clients: 0 of 1 ran"), 1) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "orders"), json_number(r.output, "commits")) << r.output;
  expect_invariants_ok(r);
}

// A stalled client beside a parked slot: in an elastic job whose rank 3 is
// a vacancy (its client 2's slot parked), rank 1 (client 0) is stopped from
// outside for longer than the recovery timeout. Client 1 stalls on client
// 0's pending timestamp, behind which lies client 2's parked one, and must
// recover client 0, not the parked slot; a process that joins afterwards
// then runs the vacancy's slot unfenced and commits. (Before, the stalled
// client took the parked run for the blocker and fenced slot 2 too, and
// the joiner ran it fenced: 0 commits. Found by the soak.)
TEST(NamElasticTest, AStalledClientsRecoveryPassesOverAParkedSlot) {
  const ProcessResult r =
      run_nam(3, fault_run(fault_seconds()), "sluice-nam",
              {"--max-ranks", "4", "--faults-after", "clients started on every compute rank",
               "--stop", "1@0.5:1.5", "--join", "2.5", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "recovered client 0 "), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "recovered client 2 "), 0)
      << "the vacancy's parked slot was taken for dead\n"
      << r.output;
  const uint64_t joined = expect_spare_client_ran(r, /*id=*/2, /*rank=*/3);
  EXPECT_GT(joined, 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  expect_invariants_ok(r);
}

// Two processes new to the job at once, both incarnation 1: rank 2's
// process is killed and started again while a joiner takes the vacancy
// rank 3 (both a second after the clients started). Each claims its own
// free slots and starts its clients by itself (before, both used one start
// barrier named by the incarnation alone, and both failed: "barrier
// 'nam-spares-1': ... a different set").
TEST(NamElasticTest, ARestartedRankAndAJoinerRunFreeSlotsSideBySide) {
  std::vector<std::string> launcher = grow_args();
  launcher.insert(launcher.end(), {"--kill", "2@1", "--restarts", "1"});
  const ProcessResult r =
      run_nam(3, fault_run(fault_seconds(), {"--spare-clients", "1"}), "sluice-nam", launcher);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 2);
  EXPECT_EQ(count_lines_with(r.output, "joined the running job as rank 3"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "sluice-nam: rank 2: incarnation 1 runs spare client "), 1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "sluice-nam: rank 3: incarnation 1 runs spare client "), 1)
      << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 2u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 1u) << r.output;
  expect_invariants_ok(r);
}

// A job scales down: `sluice run --leave 1@1` asks rank 1 (the compute
// rank that would report) to leave a second after the clients started.
// Its client stops at its next transaction and retires, the rank writes
// its results and leaves the job; the others go on to the end of the run,
// the next compute rank reports, and the report counts the leaver's commits
// and checks its orders. Nothing is recovered: no one died.
TEST(NamElasticTest, ARankAskedToLeaveStopsItsClientsAndTheReportCountsThem) {
  const ProcessResult r = run_nam(4, fault_run(fault_seconds()), "sluice-nam",
                                  {"--faults-after", "clients started on every compute rank",
                                   "--leave", "1@1", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output,
                             "[1] sluice-nam: rank 1: asked to leave: its clients stopped after "),
            1)
      << r.output;
  EXPECT_EQ(
      count_lines_with(r.output, "[2] sluice-nam: rsi checkout: 3 clients on 3 compute ranks"), 1)
      << "rank 2 reports, counting the leaver\n"
      << r.output;
  EXPECT_EQ(json_number(r.output, "ranks_left"), 1u) << r.output;
  const uint64_t left = json_number(r.output, "left_commits");
  EXPECT_GT(left, 0u) << r.output;
  EXPECT_GT(json_number(r.output, "commits"), left) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 0u) << r.output;
  expect_invariants_ok(r);
}

// A leaver's number taken by a joiner before the report (an elastic job
// of 4 ranks, `--spare-clients 1`: rank 1 leaves a second after the clients
// started, and a process joins a second later, takes the free number 1 and
// runs the spare slot). The reporter still counts the leaver's commits and
// client as a rank that left, from its summary's left word (before, it
// asked Cluster::left(1), which the joiner had made false again, and
// counted rank 1's client as one that died).
TEST(NamElasticTest, ALeaversNumberTakenByAJoinerStillCountsAsLeft) {
  const ProcessResult r =
      run_nam(4, fault_run(fault_seconds(), {"--spare-clients", "1"}), "sluice-nam",
              {"--max-ranks", "4", "--faults-after", "clients started on every compute rank",
               "--leave", "1@1", "--join", "2", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "joined the running job as rank 1"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "sluice-nam: rank 1: incarnation 1 runs spare client 3"), 1)
      << r.output;
  EXPECT_EQ(json_number(r.output, "ranks_left"), 1u) << r.output;
  EXPECT_GT(json_number(r.output, "left_commits"), 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 4u)
      << "the leaver's, ranks 2 and 3's and the joiner's\n"
      << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 1u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients_recovered"), 0u) << r.output;
  expect_invariants_ok(r);
}

// The same growth under 2PC: the joiner claims the vacancy's client slot,
// memory server 0 admits it and serves it on flows of the slot's own
// (declared by both as it is admitted), and the report counts it. No
// client died, so every order is one commit: orders == commits (nothing
// lost, nothing doubled). (Before, the newcomer had no slot to take and
// left with exit 1.)
TEST(NamElasticTest, ATwoPcJobsJoinerRunsItsVacancysClientOnFlowsOfItsOwn) {
  const ProcessResult r =
      run_nam(3, fault_run(fault_seconds(), {"--protocol", "2pc"}), "sluice-nam", grow_args());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "joined the running job as rank 3"), 1) << r.output;
  const uint64_t joined = expect_spare_client_ran(r, /*id=*/2, /*rank=*/3);
  EXPECT_EQ(count_lines_with(r.output,
                             "[0] nam 2pc: memory server rank 0: serves client slot 2 "
                             "of rank 3 (incarnation 1)"),
            1)
      << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients"), 3u) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "3 clients on 3 compute ranks"), 1) << r.output;
  EXPECT_GT(json_number(r.output, "commits"), joined) << r.output;
  EXPECT_EQ(json_number(r.output, "orders"), json_number(r.output, "commits")) << r.output;
}

// 2PC with two memory servers: rank 3 is killed and started again while a
// joiner takes the vacancy rank 4, a second after the clients started. Each
// new process claims a free slot (the spare, the vacancy's); memory server
// 0 admits each and tells server 1 (ADMIT on the peer flow), so both
// servers serve both slots; the dead first process's transactions are
// resolved by the servers' termination protocol, and the invariants hold.
TEST(NamElasticTest, TwoPcServersAdmitARestartedRanksAndAJoinersSlotsSideBySide) {
  std::vector<std::string> launcher = {
      "--max-ranks", "5", "--faults-after", "clients started on every compute rank",
      "--join",      "1", "--kill",         "3@1",
      "--restarts",  "1", "--grace",        "30"};
  const ProcessResult r =
      run_nam(4,
              fault_run(fault_seconds(),
                        {"--protocol", "2pc", "--memory-servers", "2", "--spare-clients", "1"}),
              "sluice-nam", launcher);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 3);
  EXPECT_EQ(count_lines_with(r.output, "joined the running job as rank 4"), 1) << r.output;
  for (const char* rank : {"3", "4"}) {
    EXPECT_EQ(count_lines_with(r.output, std::string("sluice-nam: rank ") + rank +
                                             ": incarnation 1 runs spare client "),
              1)
        << r.output;
    EXPECT_EQ(
        count_lines_with_all(r.output, {"nam 2pc: memory server rank ", ": serves client slot ",
                                        std::string(" of rank ") + rank + " (incarnation 1)"}),
        2)
        << "both servers serve rank " << rank << "'s slot\n"
        << r.output;
  }
  EXPECT_EQ(count_lines_with(r.output, "the requests of compute rank 3 ended: PeerLost"), 2)
      << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 2u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 3u) << r.output;
  expect_invariants_ok(r);
}

// A process that joined a 2PC job is killed while it runs its slot's
// client: both flows of the slot end abnormally at the memory server, which
// resolves what the client left prepared as for any dead client; the
// reporter counts the slot as a client that died, and the invariants hold.
TEST(NamElasticTest, ATwoPcJoinerKilledWhileItRunsItsSlotIsResolvedLikeAnyDeadClient) {
  const std::vector<std::string> launcher = {
      "--max-ranks", "4",   "--faults-after", "clients started on every compute rank",
      "--join",      "0.5", "--kill",         "3@2.5",
      "--grace",     "30"};
  const ProcessResult r =
      run_nam(3, fault_run(fault_seconds(), {"--protocol", "2pc"}), "sluice-nam", launcher);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 3);
  EXPECT_EQ(count_lines_with(r.output, "sluice-nam: rank 3: incarnation 1 runs spare client 2"), 1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output,
                             "[0] nam 2pc: memory server rank 0: the requests of client "
                             "slot 2 of rank 3 (incarnation 1) ended: PeerLost"),
            1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output,
                             "spare client 2 of rank 3 (incarnation 1) was lost while "
                             "it ran; it counts as a client that died"),
            1)
      << r.output;
  EXPECT_EQ(json_number(r.output, "spare_clients_run"), 0u) << r.output;
  EXPECT_EQ(json_number(r.output, "clients"), 2u) << r.output;
  expect_invariants_ok(r);
}

// An elastic job launched with its memory server alone (the compute ranks
// all vacancies): nothing would run and nobody would report, so it fails
// saying so (before, it exited 0 with no result).
TEST(NamElasticTest, AJobStartedWithItsMemoryServersOnlyFailsSayingSo) {
  const ProcessResult r = run_nam(1, fault_run("1"), "sluice-nam", {"--max-ranks", "3"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "memory server rank 0: no compute rank is in the job"), 1)
      << r.output;
  EXPECT_EQ(r.output.find("invariants:"), std::string::npos) << r.output;
}

// Memory server 1 dies in the middle of the run: every
// client fails with PeerLost naming it, each compute rank says so once (the
// harness's root cause) after the ranks closed the run without it, and no
// result or verdict is printed.
TEST(NamFaultTest, MemoryServerLossFailsTheClientsWithPeerLost) {
  const ProcessResult r =
      run_nam(4,
              {"--memory-servers", "2", "--products", "100", "--record-bytes", "32", "--txns", "0",
               "--seconds", fault_seconds(), "--browse-percent", "50", "--think-us", "1000"},
              "sluice-nam", kill_args(1));
  EXPECT_NE(r.exit_code, 0) << r.output;
  expect_killed(r, 1);
  (void)expect_survivors_name_the_loss(r, {"2", "3"}, "nam: memory server rank 1 is lost");
  EXPECT_EQ(r.output.find("invariants:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("txn/s"), std::string::npos) << r.output;
}

// ------------------------------------------------------------ 2PC faults

// A 2PC run (2 memory servers; compute ranks 2 and 3, one client each) in
// which the launcher kills rank 3 (`launcher`): both resource managers say
// `line` of it, the survivor finishes alone, and the invariants hold.
void expect_2pc_goes_on_without_rank_3(const std::string& seconds,
                                       const std::vector<std::string>& launcher,
                                       const std::string& line) {
  const ProcessResult r =
      run_nam(4,
              {"--protocol", "2pc", "--memory-servers", "2", "--products", "50", "--record-bytes",
               "32", "--txns", "0", "--seconds", seconds, "--think-us", "1000", "--json"},
              "sluice-nam", launcher);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_killed(r, 3);
  EXPECT_EQ(count_lines_with(r.output, line), 2) << r.output;
  expect_invariants_ok(r);
  EXPECT_EQ(json_number(r.output, "clients"), 1u) << "only the survivor reports\n" << r.output;
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
}

// Two memory servers, two compute ranks of one client each; rank 3 dies
// mid-run. Both resource managers see its requests end abnormally and
// resolve what it left prepared (if it was in a commit), the survivor goes
// on and finishes, and the invariants hold.
TEST(NamTwoPcFaultTest, ClientRankKilledMidRunIsResolvedAndTheInvariantsHold) {
  expect_2pc_goes_on_without_rank_3(fault_seconds(), kill_args(3),
                                    "the requests of compute rank 3 ended: PeerLost");
}

// Its negative control: with --no-recovery the memory servers fail the run
// at the rank's loss, naming it, instead of resolving its transactions.
TEST(NamTwoPcFaultTest, WithRecoveryOffAKilledClientRankFailsTheRunNamingIt) {
  const ProcessResult r =
      run_nam(4,
              {"--protocol", "2pc", "--memory-servers", "2", "--products", "50", "--record-bytes",
               "32", "--txns", "0", "--seconds", fault_seconds(), "--think-us", "1000", "--json",
               "--no-recovery"},
              "sluice-nam", kill_args(3));
  EXPECT_NE(r.exit_code, 0) << r.output;
  expect_killed(r, 3);
  EXPECT_GE(
      count_lines_with(r.output, "compute rank 3 was lost, and recovery is off (--no-recovery)"), 1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "invariants: OK"), 0) << r.output;
}

// 2PC: a compute rank killed while the job starts, before its request and
// reply flows are set up (over ofi only, as the RSI case above): both
// resource managers treat it as a rank whose requests ended before they
// began, the survivor runs, and the invariants hold. Before, the memory
// servers' set-up failed with PeerLost and every rank ended.
TEST(NamTwoPcFaultTest, AComputeRankKilledWhileTheJobStartsIsLeftOut) {
  expect_2pc_goes_on_without_rank_3("3", {"--kill", "3@0.3", "--keep-going", "--grace", "30"},
                                    "compute rank 3 was lost before its requests began");
}

// The records the resource managers resolved for a dead client, summed over
// their lines ("..., rolled back, N records" / "rolled forward, N records").
uint64_t resolved_records(const std::string& output, const std::string& how) {
  uint64_t total = 0;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(how + ", ");
    if (line.find("nam 2pc: memory server rank") == std::string::npos || at == std::string::npos)
      continue;
    total += std::stoull(line.substr(at + how.size() + 2));
  }
  return total;
}

// The two delicate points of a two-phase commit, with the death fixed there
// (the launcher's --kill cannot aim that finely): the test program
// nam_twopc_kill_program runs two resource managers and one client that
// kills itself (SIGKILL) on its first commit that reaches `at`; the
// resource managers resolve what it left, and the invariants hold.
ProcessResult kill_2pc_client_at(const std::string& at) {
  const ProcessResult r =
      run_nam(3, {at}, "nam_twopc_kill_program", {"--keep-going", "--grace", "60"});
  EXPECT_EQ(r.exit_code, 128 + 9) << "the client's own SIGKILL is the job's failure\n" << r.output;
  EXPECT_EQ(count_lines_with(r.output, "nam test hook: client 0 kills itself"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "the requests of compute rank 2 ended: PeerLost"), 2)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "invariants: OK"), 1) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "0 locked"), 1) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  return r;
}

// Killed after every participant voted yes, before any COMMIT: no server
// committed, so all 7 records the commit prepared (3 products, the order, 3
// lines) are rolled back. The whole command runs, and the client's rank 3
// dies at its 20th commit that got that far (sluice::kill_point
// "nam-2pc-prepared", armed by `sluice run --kill-at` in that process alone;
// no rank is told); the survivor finishes and the invariants hold.
TEST(NamTwoPcFaultTest, ClientKilledAfterPrepareIsRolledBackEverywhere) {
  const ProcessResult r =
      run_nam(4,
              {"--protocol", "2pc", "--memory-servers", "2", "--products", "50", "--record-bytes",
               "32", "--txns", "0", "--seconds", fault_seconds(), "--think-us", "1000", "--json"},
              "sluice-nam", {"--kill-at", "3:nam-2pc-prepared:20", "--grace", "30"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(
      count_lines_with(r.output, "[3] sluice: kill point 'nam-2pc-prepared' reached (pass 20)"), 1)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "the requests of compute rank 3 ended: PeerLost"), 2)
      << r.output;
  EXPECT_EQ(resolved_records(r.output, "rolled back"), 7u) << r.output;
  EXPECT_EQ(resolved_records(r.output, "rolled forward"), 0u) << r.output;
  expect_invariants_ok(r);
  EXPECT_GT(json_number(r.output, "commits"), 0u) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Killed after one participant committed, before the other heard: the
// other rolls its prepared records forward (the decision was commit), so
// the checkout is whole: the invariants (stock + ordered = initial, 3 lines
// per order) would fail on half of it.
TEST(NamTwoPcFaultTest, ClientKilledBetweenTheCommitsIsRolledForward) {
  const ProcessResult r = kill_2pc_client_at("partial-commit");
  EXPECT_GT(resolved_records(r.output, "rolled forward"), 0u) << r.output;
  EXPECT_LT(resolved_records(r.output, "rolled forward"), 7u) << r.output;
  EXPECT_EQ(resolved_records(r.output, "rolled back"), 0u) << r.output;
}

// A resource manager dies mid-run: every client fails with PeerLost naming
// it, the other memory server stops with PeerLost naming it, and no result
// or verdict is printed.
TEST(NamTwoPcFaultTest, MemoryServerLossFailsEveryoneWithPeerLost) {
  const ProcessResult r = run_nam(
      4,
      {"--protocol", "2pc", "--memory-servers", "2", "--products", "100", "--record-bytes", "32",
       "--txns", "0", "--seconds", fault_seconds(), "--browse-percent", "50", "--think-us", "1000"},
      "sluice-nam", kill_args(1));
  EXPECT_NE(r.exit_code, 0) << r.output;
  expect_killed(r, 1);
  if (expect_survivors_name_the_loss(r, {"2", "3"}, "nam 2pc: memory server rank 1 is lost")) {
    EXPECT_EQ(count_lines_with(r.output, "memory server rank 0: 2pc failed: PeerLost"), 1)
        << r.output;
  }
  EXPECT_EQ(r.output.find("invariants:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("txn/s"), std::string::npos) << r.output;
}

}  // namespace
