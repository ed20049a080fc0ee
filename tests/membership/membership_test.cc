// Membership views through `sluice run` (membership_program.cc): the
// launcher kills a rank at a moment no rank knows; the survivors learn the
// next view, agree how far they got and finish every round exactly once; a
// restarted rank enters the view after as its next incarnation and finishes
// with them.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "support/test_support.h"

namespace sluice {
namespace {

testing::ProcessResult run_membership_job(int ranks, const std::vector<std::string>& launcher_args,
                                          const std::vector<std::string>& program_args = {}) {
  return testing::run_process(
      testing::job_argv(ranks, 150, "sluice-test-membership-program", program_args, launcher_args),
      {}, std::chrono::seconds(180));
}

// Every one of `members` ranks printed the final agreement once, and all
// printed the same one: `line`.
void expect_one_agreement(const testing::ProcessResult& r, int members, const std::string& line) {
  std::set<std::string> lines;
  int count = 0;
  std::regex re(R"(AGREED epoch \d+ ranks [0-9,]+ values [0-9,]+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    lines.insert(it->str());
    ++count;
  }
  EXPECT_EQ(count, members) << r.output;
  EXPECT_EQ(lines, std::set<std::string>{line}) << r.output;
}

TEST(MembershipTest, UndisturbedRanksStayInViewZeroAndAgree) {
  const testing::ProcessResult r =
      run_membership_job(3, {}, {"--rounds", "20", "--interval-ms", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "rounds 20 last 19 epoch 0"), 3) << r.output;
  expect_one_agreement(r, 3, "AGREED epoch 0 ranks 0,1,2 values 20,20,20");
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
}

// An elastic job launched with 2 of its 3 rank numbers: rank 0 exposes a
// region and rank 1 reads it, while rank 2 is a vacancy (no process has
// held it, so it never says which host it is on). Before, the expose waited
// for the vacancy's host and failed: "key 'host/2' will never be put".
TEST(MembershipTest, AnElasticJobsRanksShareARegionWhileANumberIsVacant) {
  const testing::ProcessResult r = run_membership_job(
      2, {"--max-ranks", "3"}, {"--rounds", "5", "--interval-ms", "5", "--region"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "REGION rank 1 read 42"), 1) << r.output;
  EXPECT_EQ(testing::warning_lines(r.output), "") << r.output;
  expect_one_agreement(r, 2, "AGREED epoch 0 ranks 0,1 values 5,5");
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
}

// Unannounced: the program takes no victim; the launcher picks the moment.
TEST(MembershipTest, SurvivorsOfAKilledRankLearnTheNextViewAndFinishEveryRound) {
  const testing::ProcessResult r =
      run_membership_job(4, {"--keep-going", "--kill", "2@1.5"},
                         {"--rounds", "60", "--interval-ms", "50", "--worker-watch"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;  // an injected death does not count against it
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  // Each survivor reacted to view 1 without rank 2 and ran the last round.
  for (int rank : {0, 1, 3}) {
    const std::string me = "rank " + std::to_string(rank) + " ";
    EXPECT_EQ(testing::count_lines_with_all(r.output, {"VIEW " + me, "epoch 1 members 0,1,3"}), 1)
        << r.output;
    EXPECT_EQ(testing::count_lines_with_all(r.output, {"DONE " + me, "last 59 epoch 1"}), 1)
        << r.output;
    // A Worker watching the views (Worker::on_view) is told of it once.
    EXPECT_EQ(testing::count_lines_with(r.output, "WORKER " + me), 1) << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "WORKER " + me + "view epoch 1 members 0,1,3"), 1)
        << r.output;
  }
  expect_one_agreement(r, 3, "AGREED epoch 1 ranks 0,1,3 values 60,60,60");
  // The registry's view-change line: the epoch, its cause, the members.
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"registry: view 1: rank 2 died (last heard ",
                                                     " ms before); members 0,1,3"}),
            1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The same kill with --restarts 1: rank 2 comes back as incarnation 1 (view
// 2, every rank a member), resumes from the round the others agree on, and
// all four finish together.
TEST(MembershipTest, ARestartedRankEntersTheNextViewAndFinishesWithTheOthers) {
  const testing::ProcessResult r = run_membership_job(4, {"--restarts", "1", "--kill", "2@1.5"},
                                                      {"--rounds", "80", "--interval-ms", "50"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with_all(r.output, {"DONE rank 2 incarnation 1", "last 79"}), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "last 79 epoch 2"), 4) << r.output;
  expect_one_agreement(r, 4, "AGREED epoch 2 ranks 0,1,2,3 values 80,80,80,80");
  EXPECT_EQ(
      testing::count_lines_with_all(r.output, {"registry: view 1: rank 2 died", "members 0,1,3"}),
      1)
      << r.output;
  EXPECT_EQ(
      testing::count_lines_with_all(r.output, {"registry: view 2: rank 2 rejoined (incarnation 1, ",
                                               "after the loss); members 0,1,2,3"}),
      1)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace
}  // namespace sluice
