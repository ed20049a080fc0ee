// Flows that re-form among the living, through `sluice run`
// (reform_program.cc): a keyed sum in rounds, one shuffle per round declared
// in the current view (Cluster::declare(view, spec)), its splits and key
// groups spread by KeyGroups. The launcher kills a rank (or stops it past the
// peer timeout) at a moment no rank knows; every survivor runs the round
// again in the next view, the lost rank's groups move to the others, and
// every round commits once with the sums of its input. With --restarts the
// rank comes back and takes its groups again.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include "support/test_support.h"

namespace sluice {
namespace {

// The launcher gives up after `limit_s`; `env`: the ranks' environment.
testing::ProcessResult run_reform_job(
    int ranks, const std::vector<std::string>& launcher_args,
    const std::vector<std::string>& program_args = {},
    const std::map<std::string, std::string>& env = {{"SLUICE_PEER_TIMEOUT_MS", "1000"}},
    int limit_s = 150) {
  return testing::run_process(
      testing::job_argv(ranks, limit_s, "sluice-test-reform-program", program_args, launcher_args),
      env, std::chrono::seconds(limit_s + 30));
}

// Rounds of 8 splits x 20,000 records: a round takes some milliseconds, so
// that a fault 10 ms after round 10 began lands inside one (in the declare,
// the pushes or the commit, as the machine's speed has it; each is covered).
std::vector<std::string> program(int rounds, int interval_ms = 0,
                                 std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--rounds", std::to_string(rounds), "--records",
                                   "20000",    "--interval-ms",        std::to_string(interval_ms)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> with_fault(std::vector<std::string> launcher, bool stop = false,
                                    double after_s = 0.01) {
  for (const std::string& a : testing::fault_at_line("MARK round 10 begins", 2, after_s, stop))
    launcher.push_back(a);
  return launcher;
}

// Rank `rank` printed its DONE line once, having committed `committed` of
// `rounds` rounds with the sums their input gives.
void expect_done(const testing::ProcessResult& r, int rank, int incarnation, int committed,
                 int rounds) {
  std::regex re("DONE rank " + std::to_string(rank) + " incarnation " +
                std::to_string(incarnation) + " committed " + std::to_string(committed) +
                " rounds " + std::to_string(rounds) + R"( checksum (\d+) expect (\d+))");
  int count = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    ++count;
    EXPECT_EQ((*it)[1].str(), (*it)[2].str()) << it->str();
  }
  EXPECT_EQ(count, 1) << "rank " << rank << "\n" << r.output;
}

// The groups the REFORMED lines of view `epoch` say were taken (or given
// back: `field` "gave"), over all ranks.
std::set<int> groups_moved(const std::string& output, int epoch, const std::string& field) {
  std::set<int> out;
  std::regex re("REFORMED rank \\d+ epoch " + std::to_string(epoch) +
                R"( members [0-9,]+ owns [0-9,-]+ took ([0-9,-]+) gave ([0-9,-]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    const std::string list = (*it)[field == "took" ? 1 : 2].str();
    if (list == "-") continue;
    size_t pos = 0;
    while (pos < list.size()) {
      const size_t comma = list.find(',', pos);
      out.insert(std::stoi(list.substr(pos, comma - pos)));
      pos = comma == std::string::npos ? list.size() : comma + 1;
    }
  }
  return out;
}

// Rank 2's home groups of 16 over 4 owners: g % 4 == 2.
const std::set<int> kRank2Groups{2, 6, 10, 14};

TEST(ReformTest, UndisturbedRoundsCommitOnceWithTheSumsOfTheirInput) {
  const testing::ProcessResult r = run_reform_job(4, {}, program(20));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) expect_done(r, rank, 0, 20, 20);
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "REFORMED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "RETRY"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Unannounced: the program takes no victim; the launcher kills rank 2 a
// moment after rank 0 starts round 10.
TEST(ReformTest, AKilledRanksGroupsMoveToTheSurvivorsAndEveryRoundCommitsOnce) {
  const testing::ProcessResult r = run_reform_job(4, with_fault({"--keep-going"}), program(30));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;  // an injected death does not count against it
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: injecting --kill 2@"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  // Every survivor learnt of the loss from the library, none by waiting
  // out its own deadline.
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"RETRY", "Timeout"}), 0) << r.output;
  // Each survivor committed every round once, with the input's sums (the
  // rounds before the kill included: it committed them in view 0).
  for (int rank : {0, 1, 3}) {
    expect_done(r, rank, 0, 30, 30);
    EXPECT_EQ(testing::count_lines_with_all(
                  r.output, {"REFORMED rank " + std::to_string(rank) + " ", "members 0,1,3"}),
              1)
        << r.output;
  }
  EXPECT_EQ(testing::count_lines_with(r.output, "DONE rank 2 "), 0) << r.output;
  // Rank 2's groups, and only they, moved to the survivors.
  EXPECT_EQ(groups_moved(r.output, 1, "took"), kRank2Groups) << r.output;
  EXPECT_TRUE(groups_moved(r.output, 1, "gave").empty()) << r.output;
  EXPECT_EQ(
      testing::count_lines_with_all(r.output, {"registry: view 1: rank 2 died", "members 0,1,3"}),
      1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A combiner flow declared in the view (--combiner: count and sum by key)
// re-forms among the living as a shuffle does: rank 2 is killed a moment
// after round 10 began (no rank is told), the survivors declare the round
// again in the next view, the groups' hash spreads them over the three
// members left, and every key of every round is committed once with its
// input's count and sum. Negative control: declared outside any view
// (--no-reform), the same kill fails the job.
TEST(ReformTest, ACombinerFlowReformsAmongTheSurvivorsAndEveryRoundCommitsOnce) {
  const testing::ProcessResult r =
      run_reform_job(4, with_fault({"--keep-going"}), program(30, 0, {"--combiner"}));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: injecting --kill 2@"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  // Every survivor learnt of the loss from the library, none by waiting
  // out its own 90 s deadline (a target once waited so for a source whose
  // rank failed its declaration before it mapped that target's rings).
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"RETRY", "Timeout"}), 0) << r.output;
  for (int rank : {0, 1, 3}) {
    expect_done(r, rank, 0, 30, 30);
    EXPECT_EQ(testing::count_lines_with_all(
                  r.output, {"REFORMED rank " + std::to_string(rank) + " ", "members 0,1,3"}),
              1)
        << r.output;
  }
  EXPECT_EQ(testing::count_lines_with(r.output, "DONE rank 2 "), 0) << r.output;

  const testing::ProcessResult control = run_reform_job(
      4, with_fault({"--keep-going"}), program(30, 0, {"--combiner", "--no-reform"}));
  EXPECT_NE(control.exit_code, 0) << control.output;
  EXPECT_GE(testing::count_lines_with(control.output, "FAILED"), 1) << control.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Ranks held up in a declaration (the test hook SLUICE_TEST_MAP_DELAY:
// after publishing their rings, before mapping their peers', as ranks
// descheduled there would be) while rank 2 is killed: the peer timeout is
// 30 s and the launcher gives up after 20 s, so a survivor that waits out
// the peer timeout anywhere fails the test.
testing::ProcessResult run_held_up(const std::string& holds, double kill_after_s) {
  return run_reform_job(
      4, with_fault({"--keep-going"}, false, kill_after_s), program(30, 0, {"--combiner"}),
      {{"SLUICE_PEER_TIMEOUT_MS", "30000"}, {"SLUICE_TEST_MAP_DELAY", holds}}, 20);
}

void expect_survivors_commit_every_round(const testing::ProcessResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "timed out after"), 0) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"RETRY", "Timeout"}), 0) << r.output;
  for (int rank : {0, 1, 3}) expect_done(r, rank, 0, 30, 30);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Rank 1 gives the round's flow up in its declaration (it finds rank 2
// dead) and frees its rings while rank 0, alive, has not mapped them yet:
// rank 0 then sees a newer view than the flow's and gives up too, at once.
// (It used to wait out the peer timeout for rank 1, alive, to be declared
// lost: 5 s by default at every such re-formation; here 30 s.)
TEST(ReformTest, ARankWhosePeerGaveTheFlowUpForANewViewFollowsAtOnce) {
  const testing::ProcessResult r =
      run_held_up("0:sum-10@0:1000,1:sum-10@0:300,2:sum-10@0:400", 0.1);
  expect_survivors_commit_every_round(r);
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"RETRY rank 0 round 10", "ViewChanged"}), 1)
      << r.output;
}

// Rank 0 finds rank 2 dead while it maps its peers' rings: it still maps
// rank 3's, so that its source's abort reaches rank 3's target, which had
// finished its declaration and waits for that source. (It used to stop at
// the first failure, and rank 3 waited for ever.)
TEST(ReformTest, ADeclarationThatFailsAbortsItsSourceTowardsEveryTargetItCanMap) {
  const testing::ProcessResult r = run_held_up("0:sum-10@0:500", 0.05);
  expect_survivors_commit_every_round(r);
  for (int rank : {1, 3}) {
    EXPECT_EQ(
        testing::count_lines_with(r.output, "RETRY rank " + std::to_string(rank) + " round 10"), 1)
        << r.output;
  }
}

// Rank 2 stopped (SIGSTOP) past the 1 s peer timeout: the survivors fence
// it (SIGKILL: the launcher's status is 137) and go on as after a kill.
TEST(ReformTest, AStoppedRankIsFencedAndTheSurvivorsCommitEveryRoundOnce) {
  const testing::ProcessResult r =
      run_reform_job(4, with_fault({"--keep-going"}, true), program(30));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  for (int rank : {0, 1, 3}) expect_done(r, rank, 0, 30, 30);
  EXPECT_EQ(groups_moved(r.output, 1, "took"), kRank2Groups) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The same kill with --restarts 1: rank 2 comes back as incarnation 1, the
// survivors give its groups back, and all four finish every round.
TEST(ReformTest, ARestartedRankTakesItsGroupsBackAndFinishesWithTheOthers) {
  const testing::ProcessResult r =
      run_reform_job(4, with_fault({"--restarts", "1"}), program(40, 10));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  for (int rank : {0, 1, 3}) expect_done(r, rank, 0, 40, 40);
  // The new process commits the rounds from where the others were when it
  // joined: at least one, the last included.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(DONE rank 2 incarnation 1 committed (\d+) rounds 40)")))
      << r.output;
  EXPECT_GE(std::stoi(m[1].str()), 1) << r.output;
  expect_done(r, 2, 1, std::stoi(m[1].str()), 40);
  // In view 2 every rank owns its home groups again (g % 4 == rank); the
  // survivors gave back what they took in view 1, if they ran a round there.
  for (int rank = 0; rank < 4; ++rank) {
    const std::string home = std::to_string(rank) + "," + std::to_string(rank + 4) + "," +
                             std::to_string(rank + 8) + "," + std::to_string(rank + 12);
    EXPECT_EQ(
        testing::count_lines_with_all(r.output, {"REFORMED rank " + std::to_string(rank) +
                                                 " epoch 2 members 0,1,2,3 owns " + home + " "}),
        1)
        << r.output;
  }
  EXPECT_EQ(groups_moved(r.output, 2, "gave"), groups_moved(r.output, 1, "took")) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"registry: view 2: rank 2 rejoined "
                                                     "(incarnation 1, ",
                                                     "after the loss); members 0,1,2,3"}),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The same kill with a spare (--spares 1, no --restarts or --keep-going): the
// spare process, waiting in the job since the start, takes rank 2's place
// as its incarnation 1 as soon as the registry declares it dead; the job
// ends as with a restart, and no restart happened.
TEST(ReformTest, ASpareTakesTheDeadRanksPlaceAndFinishesWithTheOthers) {
  const testing::ProcessResult r =
      run_reform_job(4, with_fault({"--spares", "1"}), program(40, 10));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: injecting --kill 2@"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"rank 2 was killed by signal 9", "a spare takes its place"}),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: spare 0 (pid "), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "again (restart"), 0) << r.output;
  for (int rank : {0, 1, 3}) expect_done(r, rank, 0, 40, 40);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(\[2\] DONE rank 2 incarnation 1 committed (\d+) rounds 40)")))
      << r.output;
  EXPECT_GE(std::stoi(m[1].str()), 1) << r.output;
  expect_done(r, 2, 1, std::stoi(m[1].str()), 40);
  EXPECT_EQ(groups_moved(r.output, 2, "gave"), groups_moved(r.output, 1, "took")) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"registry: view 2: rank 2 rejoined "
                                                     "(incarnation 1, a spare, ",
                                                     "members 0,1,2,3"}),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// With --restarts too, a spare used is replaced by a new one (a restart of
// the rank it replaced), so a second death of the same rank finds a spare
// waiting again: rank 2 is killed twice, 0.01 s and 0.6 s after round 10
// began (no rank is told), spare 0 takes its place as incarnation 1, the new
// spare 1 as incarnation 2, and every round commits once. Without
// --restarts (the negative control) no spare replaces spare 0: the second
// death finds none, and rank 2 never comes back as incarnation 2.
std::vector<std::string> two_kills(std::vector<std::string> launcher) {
  for (const char* a :
       {"--faults-after", "MARK round 10 begins", "--kill", "2@0.01", "--kill", "2@0.6"})
    launcher.push_back(a);
  return launcher;
}

TEST(ReformTest, AUsedSpareIsReplacedSoASecondDeathFindsOneToo) {
  const testing::ProcessResult r =
      run_reform_job(4, two_kills({"--spares", "1", "--restarts", "2"}), program(120, 10));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: injecting --kill 2@"), 2) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"sluice run: spare 0 (pid ", "took the place of rank 2"}),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"sluice run: spare 1 (pid ", "took the place of rank 2"}),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output, "starting a new spare in place of the one rank 2 took (restart 1 of 2)"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output, "starting a new spare in place of the one rank 2 took (restart 2 of 2)"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "again (restart"), 0) << r.output;
  for (int rank : {0, 1, 3}) expect_done(r, rank, 0, 120, 120);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(\[2\] DONE rank 2 incarnation 2 committed (\d+) rounds 120)")))
      << r.output;
  expect_done(r, 2, 2, std::stoi(m[1].str()), 120);
  EXPECT_EQ(testing::count_lines_with(r.output, "ending spare(s) 2, which no rank needed"), 1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(ReformTest, WithoutRestartsAUsedSpareIsNotReplaced) {
  const testing::ProcessResult r =
      run_reform_job(4, two_kills({"--spares", "1"}), program(120, 10));
  EXPECT_FALSE(r.timed_out) << r.output;
  // (The survivors may re-form without rank 2 and finish: an injected death
  // does not count against the exit status, so the status proves nothing.)
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: spare 0 (pid "), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: spare 1 (pid "), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "starting a new spare"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "DONE rank 2 incarnation 2"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A spare no rank needs waits the job out and is ended with it: the job's
// status is its ranks'.
TEST(ReformTest, ASpareNoRankNeededEndsWithTheJob) {
  const testing::ProcessResult r = run_reform_job(4, {"--spares", "2"}, program(5));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) expect_done(r, rank, 0, 5, 5);
  EXPECT_EQ(testing::count_lines_with(r.output, "ending spare(s) 0,1, which no rank needed"), 1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Rank `rank`'s incarnation `incarnation` printed its DONE line once, at
// round `rounds`, its committed rounds (returned) checked against their input.
int expect_done_joined(const testing::ProcessResult& r, int rank, int incarnation, int rounds) {
  std::regex re("DONE rank " + std::to_string(rank) + " incarnation " +
                std::to_string(incarnation) + " committed (\\d+) rounds " + std::to_string(rounds) +
                R"( checksum (\d+) expect (\d+))");
  int count = 0, committed = -1;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    ++count;
    committed = std::stoi((*it)[1].str());
    EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << it->str();
  }
  EXPECT_EQ(count, 1) << "rank " << rank << " incarnation " << incarnation << "\n" << r.output;
  return committed;
}

// An elastic job (sluice run --max-ranks): launched with ranks 0 and 1 of
// 3 numbers, it grows when a process joins (--join, after round 5 began:
// rank 2, its vacancy, as incarnation 1), shrinks when rank 1 leaves after
// round 40 (Cluster::leave; drained only once the job has grown, so that the
// first joiner takes the vacancy however slowly it starts), and grows again when a second joiner
// takes rank 1's number. No rank is told when anyone comes or goes: each sees a new view, its flows
// re-form, KeyGroups give a newcomer its home groups (16 groups over owners 0..2: g % 3), and every
// round commits once with the sums of its input on every member.
TEST(ReformTest, AnElasticJobGrowsShrinksAndGrowsAgainAndEveryRoundCommitsOnce) {
  const testing::ProcessResult r = run_reform_job(
      2,
      {"--max-ranks", "3", "--join", "0", "--join", "0.3", "--faults-after", "MARK round 5 begins"},
      program(90, 15,
              {"--mark-round", "5", "--leave-rank", "1", "--leave-after", "40",
               "--leave-when-members", "3"}));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  expect_done(r, 0, 0, 90, 90);
  expect_done(r, 1, 0, 40, 40);
  EXPECT_GT(expect_done_joined(r, 2, 1, 90), 0);
  EXPECT_GT(expect_done_joined(r, 1, 1, 90), 0);
  EXPECT_EQ(testing::count_lines_with_all(
                r.output,
                {"registry: view 1: rank 2 joined (incarnation 1, a vacancy)", "members 0,1,2"}),
            1)
      << r.output;
  // (View 2, rank 1's departure, is logged at info; its DONE line above
  // says it left after round 40. A joiner that came first waited for it.)
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"registry: view 3: rank 1 joined (incarnation 1, in the place of the "
                           "rank that left",
                           "members 0,1,2"}),
            1)
      << r.output;
  // Each newcomer took its home groups, and only they moved to it.
  EXPECT_EQ(groups_moved(r.output, 1, "took"), (std::set<int>{2, 5, 8, 11, 14})) << r.output;
  EXPECT_EQ(groups_moved(r.output, 3, "took"), (std::set<int>{1, 4, 7, 10, 13})) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A job whose rank numbers are all held (no --max-ranks): a joiner waits,
// and takes the number of the first rank that leaves.
TEST(ReformTest, AJoinerWaitsUntilARankLeavesAndTakesItsNumber) {
  // (At info, so that the registry's line about the waiting joiner shows.)
  const testing::ProcessResult r = testing::run_process(
      testing::job_argv(
          2, 150, "sluice-test-reform-program",
          program(80, 15, {"--mark-round", "5", "--leave-rank", "1", "--leave-after", "60"}),
          {"--join", "0", "--faults-after", "MARK round 5 begins"}),
      {{"SLUICE_PEER_TIMEOUT_MS", "1000"}, {"SLUICE_LOG", "info"}}, std::chrono::seconds(180));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"registry: a joiner from", "it takes the next one a rank leaves"}),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with_all(
                r.output, {"rank 1 joined", "(a joiner that waited, in a left rank's place)"}),
            1)
      << r.output;
  expect_done(r, 0, 0, 80, 80);
  expect_done(r, 1, 0, 60, 60);
  EXPECT_GT(expect_done_joined(r, 1, 1, 80), 0);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Negative control: an elastic job whose flows are declared among every
// rank number, outside any view, cannot run: the vacancy is no member, and
// every rank fails naming it (a view-scoped declaration is what grows).
TEST(ReformTest, WithoutViewsAnElasticJobsFlowsFailNamingTheVacancy) {
  const testing::ProcessResult r =
      run_reform_job(2, {"--max-ranks", "3"}, program(5, 0, {"--no-reform"}));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(r.output,
                                          {"FAILED", "rank 2 is a vacancy of this elastic job"}),
            2)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Negative control: the same kill with the flows declared among every rank,
// outside any view, fails the job: the test sees what re-forming prevents.
TEST(ReformTest, WithoutReformingAKilledRankFailsTheJob) {
  const testing::ProcessResult r =
      run_reform_job(4, with_fault({"--keep-going"}), program(30, 0, {"--no-reform"}));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "DONE rank"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 3) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace
}  // namespace sluice
