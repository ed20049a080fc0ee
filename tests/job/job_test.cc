// The job harness (sluice/job.h). JobTest: its command line, the options it
// joins with and the exit statuses, in process. JobSystemTest: a job written
// on it alone (job_program.cc) through `sluice run`: exactly-once delivery,
// and the root cause each survivor names when a rank is killed from outside.
#include "sluice/job.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace sluice {
namespace {

int parse(Job& job, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  std::optional<int> status = job.parse(static_cast<int>(args.size()), args.data());
  return status ? *status : -1;
}

TEST(JobTest, HelpListsTheStandardFlagsAndTheProgramsOwnAndExitsZero) {
  Job job("prog", "does a thing");
  uint64_t records = 5;
  job.cli().add_option("--records", records, "how many");
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(parse(job, {"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* flag :
       {"--threads", "--transport", "--json", "--verify", "--seed", "--setup-timeout-ms",
        "--peer-timeout-ms", "--records", "does a thing", "sluice run -n RANKS -- prog"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from\n" << help;
  }
}

TEST(JobTest, ParsesTheStandardFlagsIntoTheClusterOptions) {
  Job job("prog", "does a thing");
  ASSERT_EQ(parse(job, {"--threads", "3", "--transport", "ofi", "--json", "--seed", "9",
                        "--setup-timeout-ms", "1500", "--peer-timeout-ms", "700"}),
            -1);
  EXPECT_EQ(job.flags().threads, 3u);
  EXPECT_TRUE(job.flags().json);
  EXPECT_FALSE(job.flags().verify);
  EXPECT_EQ(job.flags().seed, 9u);
  const ClusterOptions options = job.cluster_options();
  EXPECT_EQ(options.threads_per_rank, 3u);
  EXPECT_EQ(options.transport, Transport::kOfi);
  EXPECT_EQ(options.setup_timeout.count(), 1500);
  EXPECT_EQ(options.peer_timeout.count(), 700);
}

TEST(JobTest, DefaultsSetBeforeParsingStandUnlessAFlagChangesThem) {
  Job job("prog", "does a thing");
  job.flags().threads = 4;
  ASSERT_EQ(parse(job, {}), -1);
  EXPECT_EQ(job.flags().threads, 4u);
  EXPECT_EQ(job.cluster_options().threads_per_rank, 4u);
}

TEST(JobTest, WholeNumbersAreDecimalAndHelpShowsTheProgramsDefault) {
  Job job("prog", "does a thing");
  job.flags().threads = 3;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(parse(job, {"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("=3"), std::string::npos) << help;

  Job octal("prog", "does a thing");
  ASSERT_EQ(parse(octal, {"--threads", "010", "--seed", "0017"}), -1);
  EXPECT_EQ(octal.flags().threads, 10u);
  EXPECT_EQ(octal.flags().seed, 17u);
  for (const char* bad : {"-1", " 5", "0x10", "5x"}) {
    Job job2("prog", "does a thing");
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(parse(job2, {"--seed", bad}), 2) << bad;
    EXPECT_NE(::testing::internal::GetCapturedStderr().find("whole number"), std::string::npos)
        << bad;
  }
}

TEST(JobTest, BadFlagsExitTwoNamingWhatWasWrong) {
  struct Case {
    std::vector<const char*> args;
    const char* named;
  };
  for (const Case& c : std::vector<Case>{{{"--threads", "0"}, "--threads"},
                                         {{"--transport", "rdma"}, "rdma"},
                                         {{"--seed", "x"}, "--seed"},
                                         {{"--bogus"}, "--bogus"},
                                         {{"--records", "-3"}, "--records"}}) {
    Job job("prog", "does a thing");
    uint64_t records = 5;
    job.cli().add_option("--records", records, "how many")->check(CLI::NonNegativeNumber);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(parse(job, c.args), 2) << c.args[0];
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("prog: "), std::string::npos) << err;
    EXPECT_NE(err.find(c.named), std::string::npos) << err;
  }
}

TEST(JobTest, AFlagTheProgramDoesNotOfferIsRejected) {
  Job job("prog", "does a thing", kFlagThreads);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(parse(job, {"--verify"}), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("--verify"), std::string::npos);
}

TEST(JobTest, WhatTheBodyThrowsBecomesTheExitStatusAndAMessage) {
  Job job("prog", "does a thing");
  struct Case {
    std::function<int()> body;
    int status;
    const char* message;
  };
  const std::vector<Case> cases = {
      {[] { return 0; }, 0, nullptr},
      {[] { return 7; }, 7, nullptr},
      {[]() -> int { throw UsageError("--r-file x.csv:3:5: ' -7' is not a key"); }, 2,
       "prog: --r-file x.csv:3:5: ' -7' is not a key"},
      {[]() -> int { throw std::invalid_argument("bad window"); }, 2, "prog: bad window"},
      {[]() -> int { throw Error(ErrorCode::kInvalidArgument, "bad spec"); }, 2, "bad spec"},
      {[]() -> int { throw Error(ErrorCode::kBootstrap, "no SLUICE_RANK"); }, 3, "no SLUICE_RANK"},
      {[]() -> int { throw PeerLostError(2, "flow f: peer died"); }, 1,
       "prog: rank 2 was lost: flow f: peer died"},
      {[]() -> int { throw std::runtime_error("disk full"); }, 1, "prog: disk full"},
  };
  for (const Case& c : cases) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(job.run_local(c.body), c.status);
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (c.message != nullptr) {
      EXPECT_NE(err.find(c.message), std::string::npos) << err;
    } else {
      EXPECT_EQ(err, "");
    }
  }
}

// sluice::kill_point: armed by SLUICE_TEST_KILL_AT=NAME:K (read at the
// first call, in the death test's own process), the K-th pass through NAME
// is a SIGKILL, and no other name or pass does anything.
TEST(JobTest, AKillPointKillsTheProcessAtItsKthPassOnly) {
  EXPECT_EXIT(
      {
        ::setenv("SLUICE_TEST_KILL_AT", "here:3", 1);
        sluice::kill_point("here");
        sluice::kill_point("elsewhere");
        sluice::kill_point("here");
        std::fprintf(stderr, "two passes survived\n");
        sluice::kill_point("here");
        std::fprintf(stderr, "the third pass survived\n");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL),
      "two passes survived\nsluice: kill point 'here' reached \\(pass 3\\): SIGKILL");
  EXPECT_EXIT(
      {
        ::setenv("SLUICE_TEST_KILL_AT", "here:zero", 1);
        sluice::kill_point("here");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "SLUICE_TEST_KILL_AT='here:zero' is not NAME or NAME:K");
}

// enable_stop_signals: the first SIGTERM (or SIGINT) sets stop_requested()
// and the process goes on; the second ends it as by default.
TEST(JobTest, TheFirstStopSignalAsksToStopAndTheSecondEndsTheProcess) {
  for (int sig : {SIGTERM, SIGINT}) {
    EXPECT_EXIT(
        {
          sluice::enable_stop_signals();
          if (sluice::stop_requested()) std::exit(3);
          ::raise(sig);
          if (!sluice::stop_requested()) std::exit(4);
          std::fprintf(stderr, "went on after the first\n");
          ::raise(sig);
          std::exit(0);
        },
        ::testing::KilledBySignal(sig), "stopping \\(send it again to end at once\\)\nwent on");
  }
}

TEST(JobTest, RunWithoutALauncherExitsThreeSayingHowToJoin) {
  for (const char* var : {"SLUICE_RANK", "SLUICE_WORLD_SIZE", "SLUICE_REGISTRY", "SLURM_PROCID",
                          "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK", "WORLD_SIZE"}) {
    ::unsetenv(var);
  }
  Job job("prog", "does a thing");
  bool ran = false;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(job.run([&](JobContext&) {
    ran = true;
    return 0;
  }),
            3);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(ran);
  EXPECT_NE(err.find("prog: "), std::string::npos) << err;
}

TEST(JobTest, AFailureDescribesTheLostPeerFirst) {
  EXPECT_EQ((JobFailure{"flow x: died", LostPeer{3, "host-b"}}.describe()),
            "rank 3 (host-b) was lost: flow x: died");
  EXPECT_EQ((JobFailure{"disk full", std::nullopt}.describe()), "disk full");
}

// ---------------------------------------------------------------- through sluice run

testing::ProcessResult run_job(const std::vector<std::string>& program_args,
                               const std::vector<std::string>& launcher_args = {}) {
  return testing::run_process(
      testing::job_argv(3, 150, "sluice-test-job-program", program_args, launcher_args), {},
      std::chrono::seconds(180));
}

TEST(JobSystemTest, WorkersOfEveryRankDeliverEveryRecordOnce) {
  for (const char* transport : {"shm", "ofi"}) {
    const testing::ProcessResult r =
        run_job({"--threads", "2", "--records", "20000", "--transport", transport});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output,
                                        std::string("VERIFIED 120000 records over ") + transport),
              1)
        << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "warn"), 0) << r.output;
  }
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(JobSystemTest, ABadFlagEndsEveryRankWithStatusTwo) {
  const testing::ProcessResult r = run_job({"--threads", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_GE(testing::count_lines_with(r.output, "--threads"), 1) << r.output;
}

// The launcher kills rank 1 a second into the job; no rank is told. Every
// survivor names rank 1 as the cause, not the echoes of its loss in its own
// flows, and the job ends long before its 60 s of sending.
TEST(JobSystemTest, SurvivorsOfARankKilledFromOutsideNameItAsTheCause) {
  const auto t0 = std::chrono::steady_clock::now();
  const testing::ProcessResult r =
      run_job({"--threads", "2", "--seconds", "60"}, {"--kill", "1@1"});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "--kill 1@1"), 1) << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "[0] sluice-test-job-program: rank 0: rank 1 was lost"),
      1)
      << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "[2] sluice-test-job-program: rank 2: rank 1 was lost"),
      1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED"), 0) << r.output;
  EXPECT_LT(took, 50) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A worker that fails on its own (an exception of its own, not a lost
// peer): its sibling on the same rank sees that worker's end aborted, a
// "lost peer" that is its own rank; rank 1 must name the worker's error as
// its cause, not itself as a lost rank.
TEST(JobSystemTest, AWorkersOwnErrorIsItsRanksCauseNotItsRankAsALostPeer) {
  const testing::ProcessResult r =
      run_job({"--threads", "2", "--records", "200000", "--fail-after", "1000"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output,
                                      "[1] sluice-test-job-program: rank 1: worker 1 of rank 1 "
                                      "gave up after 1000 records (--fail-after)"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "rank 1: rank 1 was lost"), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A kill with --restarts 1: this program cannot take a rank back
// (Job::set_rejoin is not called), so rank 1's new process says so and
// leaves at once, instead of waiting for flows and barriers the others
// passed long ago (a 60 s set-up timeout before). The survivors hold
// before their start (--hold-ms, after "SET UP") so that the new process
// joins while the job runs: they then start without it
// (--start-without-lost) and agree. (Killed mid-run instead, the survivors
// of this program fail at once, and on a loaded machine the job could end
// before the new process joined.)
TEST(JobSystemTest, ARestartedRankOfAJobThatCannotTakeItBackLeavesAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  const testing::ProcessResult r =
      run_job({"--local", "--threads", "2", "--records", "1000", "--start-without-lost",
               "--hold-ms", "2000"},
              {"--keep-going", "--restarts", "1", "--faults-after", "SET UP", "--kill", "1@0.2"});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1) << "rank 1's new process exits 1\n" << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: starting rank 1 again"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output,
                "[1] sluice-test-job-program: rank 1: started again as incarnation 1, but "
                "sluice-test-job-program cannot take a rank back into a running job"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] STARTED rank 0 with ranks 0,2"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] STARTED rank 2 with ranks 0,2"), 1)
      << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "AGREED ranks 0,2: every worker summed 1000 records"), 1)
      << r.output;
  EXPECT_LT(took, 30) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The launcher kills rank 1 mid-run and starts it again (--restarts 1);
// the program takes it back, so rank 1 is alive again (incarnation 1) while
// the survivors look at why their workers failed, and those workers report
// errors that name no peer (--unnamed-failures). The harness still names
// rank 1 as the cause: the process the pool ran with is gone. (Before, it
// looked for a rank not alive now, found none, and reported only the
// workers' error: a program recovering on lost_peer, as sluice-stream does,
// then went on as if nothing had been lost.)
TEST(JobSystemTest, ARankThatDiedAndRejoinedDuringThePoolIsNamedAsTheCause) {
  const testing::ProcessResult r =
      run_job({"--threads", "2", "--seconds", "60", "--unnamed-failures"},
              {"--restarts", "1", "--faults-after", "RUNNING rank", "--kill", "1@0.5"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice run: starting rank 1 again"), 1)
      << r.output;
  for (const char* survivor : {"[0] sluice-test-job-program: rank 0: rank 1 was lost: ",
                               "[2] sluice-test-job-program: rank 2: rank 1 was lost: "}) {
    EXPECT_EQ(testing::count_lines_with(r.output, survivor), 1) << survivor << "\n" << r.output;
  }
  EXPECT_EQ(testing::count_lines_with(r.output, "reported without naming a peer"), 2) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// PoolOptions::start_without_lost: the launcher kills rank 1 while every
// rank holds before the start (after "SET UP"); no rank is told. The others
// start without it and agree on their sums; undisturbed, all three start.
TEST(JobSystemTest, WithStartWithoutLostTheOthersStartWithoutARankKilledBeforeTheStart) {
  const std::vector<std::string> program = {"--local",   "--threads", "2",
                                            "--records", "1000",      "--start-without-lost"};
  const testing::ProcessResult calm = run_job(program);
  EXPECT_EQ(calm.exit_code, 0) << calm.output;
  for (const char* rank : {"[0] STARTED rank 0", "[1] STARTED rank 1", "[2] STARTED rank 2"})
    EXPECT_EQ(testing::count_lines_with(calm.output, std::string(rank) + " with ranks 0,1,2"), 1)
        << calm.output;
  EXPECT_EQ(testing::count_lines_with(calm.output,
                                      "AGREED ranks 0,1,2: every worker summed 1000 records"),
            1)
      << calm.output;

  std::vector<std::string> held = program;
  held.insert(held.end(), {"--hold-ms", "1500"});
  const testing::ProcessResult r =
      run_job(held, {"--keep-going", "--faults-after", "SET UP", "--kill", "1@0.2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "injecting --kill 1@0.2"), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[0] STARTED rank 0 with ranks 0,2"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[2] STARTED rank 2 with ranks 0,2"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "[1] STARTED"), 0) << r.output;
  EXPECT_EQ(
      testing::count_lines_with(r.output, "AGREED ranks 0,2: every worker summed 1000 records"), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "MISMATCH"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// The negative control: the same kill without start_without_lost fails the
// start on both survivors, each naming rank 1 (the rank that died, not a
// survivor that left after its own start failed).
TEST(JobSystemTest, WithoutStartWithoutLostARankKilledBeforeTheStartFailsTheStart) {
  const testing::ProcessResult r =
      run_job({"--local", "--threads", "2", "--records", "1000", "--hold-ms", "1500"},
              {"--keep-going", "--faults-after", "SET UP", "--kill", "1@0.2"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (const char* survivor : {"[0] sluice-test-job-program: rank 0: rank 1 was lost: barrier "
                               "'job-start' cannot complete: rank 1",
                               "[2] sluice-test-job-program: rank 2: rank 1 was lost: barrier "
                               "'job-start' cannot complete: rank 1"}) {
    EXPECT_EQ(testing::count_lines_with(r.output, survivor), 1) << r.output;
  }
  EXPECT_EQ(testing::count_lines_with(r.output, "STARTED"), 0) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace
}  // namespace sluice
