// System tests of the `sluice` tool's launcher (`sluice run`), standalone
// registry (`sluice registry`) and `sluice version`. Ranks are plain shell
// commands, so these tests exercise the tool without the flow library.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/version.h"
#include "support/test_support.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::bin;
using testing::count_lines_with;
using testing::describe;
using testing::ProcessResult;
using testing::run_argv;
using testing::run_process;

// Every test process gets at most this long; the behaviours tested take a
// few seconds at most.
constexpr milliseconds kLimit = seconds(30);

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A child process whose output (stdout and stderr together) the test reads
// while it runs, for commands that serve until signalled.
class LiveProcess {
 public:
  explicit LiveProcess(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env = {}) {
    proc::SpawnOptions o;
    o.argv = argv;
    if (!env.empty()) o.env = proc::environment_with(env);
    o.out = proc::Output::kPipe;
    o.err = proc::Output::kToStdout;
    try {
      process_ = proc::Process::spawn(o);
    } catch (const proc::SpawnError& e) {
      output_ = e.what();
    }
  }

  bool started() const { return process_.pid() > 0; }
  void signal(int sig) { ::kill(process_.pid(), sig); }
  const std::string& output() const { return output_; }

  // Reads until `text` has appeared in the output, EOF, or the deadline.
  bool wait_for_output(const std::string& text, milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (output_.find(text) == std::string::npos) {
      if (!read_some(deadline)) return false;
    }
    return true;
  }

  // Reads the rest of the output and waits for the process to exit, for at
  // most `limit`. Returns false if it did not exit in time.
  bool wait_exit(milliseconds limit, proc::ExitStatus* status) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (read_some(deadline)) {
    }
    // Its output is closed, so the process is at most moments from exiting.
    std::optional<proc::ExitStatus> s = process_.wait_until(deadline);
    if (s) *status = *s;
    return s.has_value();
  }

 private:
  // One read, waiting until the deadline; false at EOF or the deadline.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{process_.out().get(), POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      char buf[4096];
      ssize_t n = ::read(process_.out().get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      output_.append(buf, static_cast<size_t>(n));
      return true;
    }
  }

  proc::Process process_;  // killed (its group) and reaped on destruction
  std::string output_;
};

TEST(SluiceRunTest, PrefixesEveryLineWithItsRankOnTheMatchingStream) {
  ProcessResult r = run_process(run_argv({"-n", "3", "--", "/bin/sh", "-c",
                                          "echo hello $SLUICE_RANK; echo oops $SLUICE_RANK >&2"}),
                                {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_EQ(count_lines_with(r.output, "[" + n + "] hello " + n), 1) << describe(r);
    EXPECT_EQ(count_lines_with(r.output, "[" + n + "] oops " + n), 1) << describe(r);
  }
  // Success prints nothing of the launcher's own.
  EXPECT_EQ(count_lines_with(r.output, "sluice run:"), 0) << describe(r);
  EXPECT_EQ(lines_of(r.output).size(), 6u) << describe(r);
}

TEST(SluiceRunTest, SeparatesStdoutFromStderr) {
  // The launcher's stdout alone, by discarding its stderr in a wrapper shell.
  ProcessResult r = run_process(
      {"/bin/sh", "-c", "\"$0\" run -n 2 -- /bin/sh -c 'echo out; echo err >&2' 2>/dev/null",
       bin("sluice")},
      {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "] out"), 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "] err"), 0) << describe(r);
}

TEST(SluiceRunTest, GivesEachRankItsOwnRankAndTheSameRegistryAndSecret) {
  ProcessResult r = run_process(
      run_argv({"-n", "4", "--", "/bin/sh", "-c",
                "echo env $SLUICE_RANK $SLUICE_WORLD_SIZE $SLUICE_REGISTRY $SLUICE_SECRET"}),
      {{"SLUICE_RANK", "99"}, {"SLUICE_SECRET", "inherited"}}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::regex line_re(R"(\[(\d+)\] env (\d+) (\d+) (\S+:\d+) ([0-9a-f]{32}))");
  std::set<std::string> ranks, registries, secrets;
  int matched = 0;
  for (const std::string& line : lines_of(r.output)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    ++matched;
    EXPECT_EQ(m[1], m[2]) << "prefix and SLUICE_RANK differ: " << line;
    EXPECT_EQ(m[3], "4") << line;
    ranks.insert(m[2]);
    registries.insert(m[4]);
    secrets.insert(m[5]);
  }
  EXPECT_EQ(matched, 4) << describe(r);
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"})) << describe(r);
  EXPECT_EQ(registries.size(), 1u) << describe(r);
  EXPECT_EQ(secrets.size(), 1u) << describe(r);
}

TEST(SluiceRunTest, FlushesAnUnterminatedLastLine) {
  ProcessResult r = run_process(
      run_argv({"-n", "1", "--", "/bin/sh", "-c", "printf 'first\\nno newline'"}), {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.output, "[0] first\n[0] no newline\n");
}

TEST(SluiceRunTest, PassesArgumentsAfterTheProgramToIt) {
  // `-n` after the program belongs to echo, not to sluice run.
  ProcessResult r = run_process(run_argv({"-n", "1", "/bin/echo", "-n", "x"}), {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.output, "[0] x\n");
}

TEST(SluiceRunTest, KeepsLinesWholeWhenRanksWriteAtOnce) {
  ProcessResult r = run_process(
      run_argv({"-n", "4", "--", "/bin/sh", "-c",
                "i=0; while [ $i -lt 2000 ]; do echo line-$SLUICE_RANK-$i-end; i=$((i+1)); done"}),
      {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::regex line_re(R"(\[(\d)\] line-(\d)-\d+-end)");
  int good = 0;
  for (const std::string& line : lines_of(r.output)) {
    std::smatch m;
    if (std::regex_match(line, m, line_re) && m[1] == m[2]) {
      ++good;
    } else {
      ADD_FAILURE() << "mangled line: " << line;
      break;
    }
  }
  EXPECT_EQ(good, 8000);
}

TEST(SluiceRunTest, FailingRankFailsTheJobAndTheOthersAreStoppedAfterTheGracePeriod) {
  ProcessResult r = run_process(
      run_argv({"-n", "3", "--grace", "1", "--", "/bin/sh", "-c",
                "if [ $SLUICE_RANK = 1 ]; then echo giving up; exit 3; fi; exec sleep 60"}),
      {}, kLimit);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 1 exited with status 3"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] giving up"), 1) << describe(r);
  // 1 s grace, then SIGTERM stops sleep at once.
  EXPECT_LT(r.seconds, 8) << describe(r);
  EXPECT_FALSE(r.timed_out);
}

TEST(SluiceRunTest, RanksThatFinishWithinTheGracePeriodAreNotKilled) {
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--grace", "10", "--", "/bin/sh", "-c",
                "if [ $SLUICE_RANK = 0 ]; then exit 4; fi; sleep 0.3; echo finished; exit 1"}),
      {}, kLimit);
  EXPECT_EQ(r.exit_code, 4) << describe(r);  // the first failure, not the later one
  EXPECT_EQ(count_lines_with(r.output, "[1] finished"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "rank 1 exited with status 1"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "SIGTERM"), 0) << describe(r);
  EXPECT_LT(r.seconds, 5) << describe(r);
}

TEST(SluiceRunTest, ReportsARankKilledBySignal) {
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--grace", "1", "--", "/bin/sh", "-c",
                            "if [ $SLUICE_RANK = 0 ]; then kill -9 $$; fi; exec sleep 60"}),
                  {}, kLimit);
  EXPECT_EQ(r.exit_code, 128 + 9) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 0 was killed by signal 9 (SIGKILL)"), 1)
      << describe(r);
  EXPECT_LT(r.seconds, 8) << describe(r);
}

TEST(SluiceRunTest, KeepGoingLetsTheOthersRunOnAfterARankIsKilled) {
  // Rank 0 dies at once; rank 1 outlives the grace period that would
  // otherwise stop it, and finishes on its own.
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--grace", "0.2", "--keep-going", "--", "/bin/sh", "-c",
                "if [ $SLUICE_RANK = 0 ]; then kill -9 $$; fi; sleep 1.5; echo finished"}),
      {}, kLimit);
  EXPECT_EQ(r.exit_code, 128 + 9) << describe(r);  // the failure is still reported
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 0 was killed by signal 9 (SIGKILL)"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "the other ranks go on without rank 0 (--keep-going)"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] finished"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "SIGTERM"), 0) << describe(r);
}

TEST(SluiceRunTest, RestartsStartsAFailedRankAgainAndTheJobSucceeds) {
  // Rank 1 fails in its first run only (a marker file remembers it); the
  // launcher starts it again with the same rank, and the job exits 0.
  const std::string mark =
      ::testing::TempDir() + "sluice-restart-mark-" + std::to_string(::getpid());
  std::remove(mark.c_str());
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--restarts", "1", "--", "/bin/sh", "-c",
                "if [ $SLUICE_RANK = 1 ] && [ ! -e " + mark + " ]; then touch " + mark +
                    "; echo failing; exit 3; fi; sleep 0.2; echo rank $SLUICE_RANK done"}),
      {}, kLimit);
  std::remove(mark.c_str());
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 1 exited with status 3"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: starting rank 1 again (restart 1 of 1)"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] failing"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 done"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[0] rank 0 done"), 1) << describe(r);
}

TEST(SluiceRunTest, RestartsAreBoundedAndTheLastFailureCounts) {
  ProcessResult r = run_process(
      run_argv({"-n", "1", "--restarts", "2", "--grace", "1", "--", "/bin/sh", "-c", "exit 5"}), {},
      kLimit);
  EXPECT_EQ(r.exit_code, 5) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 0 exited with status 5"), 3)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart 2 of 2)"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart 3"), 0) << describe(r);
}

// A rank that exits with status 2 (a usage error, as sluice/job.h's
// harness exits for a bad flag) is not started again: it would fail the
// same way. The job fails with that status at once.
TEST(SluiceRunTest, AUsageErrorIsNotRestarted) {
  ProcessResult r = run_process(
      run_argv({"-n", "1", "--restarts", "3", "--grace", "1", "--", "/bin/sh", "-c", "exit 2"}), {},
      kLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: rank 0 exited with status 2, a usage error: it "
                             "is not started again"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart"), 0) << describe(r);
}

// --restart-delay: each restart of a rank waits twice as long as the one
// before, up to --restart-delay-max (the rank prints when each process
// started: the gaps are at least the delays).
TEST(SluiceRunTest, RestartDelayBacksOffExponentiallyUpToItsMaximum) {
  ProcessResult r = run_process(run_argv({"-n", "1", "--restarts", "3", "--restart-delay", "0.2",
                                          "--restart-delay-max", "0.5", "--grace", "1", "--",
                                          "/bin/sh", "-c", "echo started $(date +%s.%N); exit 5"}),
                                {}, kLimit);
  EXPECT_EQ(r.exit_code, 5) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart 1 of 3) in 0.2 s"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart 2 of 3) in 0.4 s"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "again (restart 3 of 3) in 0.5 s"), 1) << describe(r);
  std::vector<double> starts;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[0] started ", 0) == 0) starts.push_back(std::stod(line.substr(12)));
  }
  ASSERT_EQ(starts.size(), 4u) << describe(r);
  const double delays[] = {0.2, 0.4, 0.5};
  for (size_t i = 0; i < 3; ++i) EXPECT_GE(starts[i + 1] - starts[i], delays[i]) << describe(r);
}

// --max-restart-rate N/S: the (N+1)-th failure within S seconds is not
// restarted; it ends the job as without --restarts.
TEST(SluiceRunTest, MaxRestartRateEndsTheJobAtTheFailureBeyondIt) {
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--restarts", "10", "--max-restart-rate", "2/60", "--grace", "1", "--",
                "/bin/sh", "-c", "[ $SLUICE_RANK = 1 ] && exit 5; sleep 30"}),
      {}, kLimit);
  EXPECT_EQ(r.exit_code, 5) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: rank 1 exited with status 5"), 3)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: starting rank 1 again"), 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: rank 1 is not started again: 2 restarts within the last "
                             "60 s already (--max-restart-rate 2/60)"),
            1)
      << describe(r);
  EXPECT_LT(r.seconds, 25) << describe(r);  // the others were stopped after the grace period
}

TEST(SluiceRunTest, RestartStrategyOptionsAreCheckedBeforeAnythingStarts) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--restart-delay", "1"}, "--restart-delay needs --restarts K"},
      {{"--max-restart-rate", "2/60"}, "--max-restart-rate needs --restarts K"},
      {{"--restarts", "1", "--max-restart-rate", "3"},
       "expected N/SECONDS (e.g. 3/60), found no '/'"},
      {{"--restarts", "1", "--max-restart-rate", "0/60"}, "with N a whole number from 1"},
      {{"--restarts", "1", "--max-restart-rate", "2/0"}, "with SECONDS above 0"},
      {{"--restarts", "1", "--max-restart-rate", "2/x"}, "expected N/SECONDS"},
      {{"--restarts", "1", "--restart-delay", "2", "--restart-delay-max", "1"},
       "--restart-delay-max 1 is shorter than --restart-delay 2"},
      {{"--restarts", "1", "--restart-delay", "-1"},
       "--restart-delay -1: expected seconds from 0 to 1e9"},
  };
  for (const auto& [options, message] : bad) {
    std::vector<std::string> args = {"-n", "1"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--", "/bin/true"});
    ProcessResult r = run_process(run_argv(args), {}, kLimit);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.output.find(message), std::string::npos) << describe(r);
  }
}

TEST(SluiceRunTest, TimeoutStopsTheJobAndExits124) {
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--timeout", "1", "--", "/bin/sleep", "60"}), {}, kLimit);
  EXPECT_EQ(r.exit_code, 124) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: timed out after 1 s; ranks still running: 0,1"),
            1)
      << describe(r);
  EXPECT_LT(r.seconds, 5) << describe(r);
}

// One hang in CI must be enough to place it: with --stacks-on-timeout the
// launcher prints every rank's threads before it stops them.
TEST(SluiceRunTest, StacksOnTimeoutPrintsTheStackOfEveryRankStillRunning) {
  if (::access("/usr/bin/gdb", X_OK) != 0)
    GTEST_SKIP() << "gdb is not installed (scripts/install-deps.sh installs it)";
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--timeout", "1", "--stacks-on-timeout", "--", "/bin/sleep", "60"}), {},
      kLimit);
  EXPECT_EQ(r.exit_code, 124) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: stacks of rank 0 (process group "), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: stacks of rank 1 (process group "), 1)
      << describe(r);
  // gdb's backtrace of sleep: at least one frame per rank, in a sleep call.
  EXPECT_GE(count_lines_with(r.output, "#0 "), 2) << describe(r);
  EXPECT_NE(r.output.find("sleep"), std::string::npos) << describe(r);
}

// The same when a rank outlives another's failure by the grace period (a
// rank that missed a loss): rank 1 fails at once, rank 0 sleeps on.
TEST(SluiceRunTest, StacksOnTimeoutPrintsTheStacksOfRanksThatOutliveTheGracePeriod) {
  if (::access("/usr/bin/gdb", X_OK) != 0)
    GTEST_SKIP() << "gdb is not installed (scripts/install-deps.sh installs it)";
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--grace", "0.5", "--stacks-on-timeout", "--", "/bin/sh",
                            "-c", "if [ \"$SLUICE_RANK\" = 1 ]; then exit 3; fi; exec sleep 60"}),
                  {}, kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: stacks of rank 0 (process group "), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: stacks of rank 1 "), 0) << describe(r);
  EXPECT_NE(r.output.find("sleep"), std::string::npos) << describe(r);
  EXPECT_LT(r.seconds, 30) << describe(r);
}

TEST(SluiceRunTest, EscalatesToSigkillForRanksThatIgnoreSigterm) {
  ProcessResult r = run_process(run_argv({"-n", "1", "--timeout", "0.5", "--", "/bin/sh", "-c",
                                          "trap '' TERM; echo ready; while :; do sleep 0.1; done"}),
                                {}, kLimit);
  EXPECT_EQ(r.exit_code, 124) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sending SIGKILL"), 1) << describe(r);
  EXPECT_LT(r.seconds, 6) << describe(r);  // 0.5 s + 2 s until SIGKILL
}

TEST(SluiceRunTest, ForwardsSigtermToTheRanks) {
  LiveProcess p({bin("sluice"), "run", "-n", "2", "--", "/bin/sh", "-c",
                 "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.1; done"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.wait_for_output("[1] ready", seconds(10))) << p.output();
  ASSERT_TRUE(p.wait_for_output("[0] ready", seconds(10))) << p.output();
  p.signal(SIGTERM);
  proc::ExitStatus status;
  ASSERT_TRUE(p.wait_exit(seconds(10), &status)) << p.output();
  EXPECT_EQ(status.exit_code, 128 + SIGTERM) << p.output();
  EXPECT_EQ(count_lines_with(p.output(), "] got TERM"), 2) << p.output();
  EXPECT_EQ(count_lines_with(p.output(), "received SIGTERM"), 1) << p.output();
}

TEST(SluiceRunTest, NamesAProgramThatDoesNotExist) {
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--", "/nonexistent/sluice-prog"}), {}, kLimit);
  EXPECT_EQ(r.exit_code, 127) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "/nonexistent/sluice-prog"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "No such file or directory"), 1) << describe(r);

  r = run_process(run_argv({"-n", "2", "--", "sluice-no-such-program"}), {}, kLimit);
  EXPECT_EQ(r.exit_code, 127) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "cannot find program 'sluice-no-such-program' in PATH"), 1)
      << describe(r);
}

TEST(SluiceRunTest, RejectsZeroRanks) {
  ProcessResult r = run_process(run_argv({"-n", "0", "--", "/bin/true"}), {}, kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "-n 0: the number of ranks must be at least 1"), 1)
      << describe(r);
}

TEST(SluiceRunTest, RejectsAMissingProgram) {
  ProcessResult r = run_process(run_argv({"-n", "2"}), {}, kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "no program given"), 1) << describe(r);
}

TEST(SluiceRunTest, RejectsABadPeerTimeout) {
  ProcessResult r = run_process(run_argv({"-n", "1", "--", "/bin/true"}),
                                {{"SLUICE_PEER_TIMEOUT_MS", "soon"}}, kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "SLUICE_PEER_TIMEOUT_MS='soon'"), 1) << describe(r);
}

TEST(SluiceRunTest, PrintOptionsShowsTheSettingsEveryRankWouldGetAndStartsNothing) {
  ProcessResult r =
      run_process(run_argv({"-n", "3", "--print-options"}),
                  {{"SLUICE_TRANSPORT", "ofi"}, {"SLUICE_PEER_TIMEOUT_MS", "1234"}}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* line : {"world_size = 3", "transport = ofi", "peer_timeout_ms = 1234",
                           "secret = (set)", "rank = (from the environment at join)"}) {
    EXPECT_EQ(count_lines_with(r.output, line), 1) << line << describe(r);
  }
  EXPECT_EQ(count_lines_with(r.output, "registry at"), 0) << "no registry started: " << describe(r);
}

TEST(SluiceRunTest, PrintOptionsRefusesAMalformedVariableNamingIt) {
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--print-options"}), {{"SLUICE_OFI_RMA", "maybe"}}, kLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "SLUICE_OFI_RMA='maybe' is not one of"), 1) << describe(r);
}

TEST(SluiceRunTest, TakesItsLogLevelFromSluiceLog) {
  ProcessResult r =
      run_process(run_argv({"-n", "1", "--", "/bin/true"}), {{"SLUICE_LOG", "info"}}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "registry at 127.0.0.1:"), 1) << describe(r);
  r = run_process(run_argv({"-n", "1", "--", "/bin/true"}), {{"SLUICE_LOG", "loud"}}, kLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(
      count_lines_with(r.output, "SLUICE_LOG='loud' is not one of error, warn, info or debug"), 1)
      << describe(r);
}

TEST(SluiceRegistryTest, PrintsItsAddressAndSecretAndStopsOnSigterm) {
  LiveProcess p({bin("sluice"), "registry", "--bind", "127.0.0.1", "--world", "2"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.wait_for_output("SLUICE_SECRET=", seconds(10))) << p.output();
  p.signal(SIGTERM);
  proc::ExitStatus status;
  ASSERT_TRUE(p.wait_exit(seconds(10), &status)) << p.output();
  EXPECT_EQ(status.exit_code, 0) << "signal " << status.term_signal << ": " << p.output();
  std::vector<std::string> lines = lines_of(p.output());
  ASSERT_GE(lines.size(), 2u) << p.output();
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(R"(SLUICE_REGISTRY=127\.0\.0\.1:[1-9]\d*)")))
      << lines[0];
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(R"(SLUICE_SECRET=[0-9a-f]{32})"))) << lines[1];
}

// The secret comes from the environment or a file: a command line is
// readable by every user of the machine (/proc/<pid>/cmdline).
TEST(SluiceRegistryTest, UsesTheSecretFromSluiceSecretWithoutPrintingIt) {
  LiveProcess p({bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", "1"},
                {{"SLUICE_SECRET", "hunter2hunter2"}});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.wait_for_output("SLUICE_REGISTRY=", seconds(10))) << p.output();
  p.signal(SIGINT);
  proc::ExitStatus status;
  ASSERT_TRUE(p.wait_exit(seconds(10), &status)) << p.output();
  EXPECT_EQ(status.exit_code, 0) << "signal " << status.term_signal << ": " << p.output();
  EXPECT_EQ(p.output().find("hunter2"), std::string::npos) << p.output();
  EXPECT_EQ(p.output().find("SLUICE_SECRET="), std::string::npos) << p.output();
  EXPECT_EQ(p.output().find("warning"), std::string::npos) << p.output();
}

TEST(SluiceRegistryTest, TakesTheSecretFromASecretFile) {
  char path[] = "/tmp/sluice-secret-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "from-a-file-secret\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  LiveProcess p(
      {bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", "1", "--secret-file", path});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.wait_for_output("SLUICE_REGISTRY=", seconds(10))) << p.output();
  p.signal(SIGTERM);
  proc::ExitStatus status;
  ASSERT_TRUE(p.wait_exit(seconds(10), &status)) << p.output();
  ::unlink(path);
  EXPECT_EQ(status.exit_code, 0) << p.output();
  EXPECT_EQ(p.output().find("from-a-file"), std::string::npos) << p.output();
  EXPECT_EQ(p.output().find("SLUICE_SECRET="), std::string::npos)
      << "not generated: " << p.output();

  ProcessResult r = run_process({bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", "1",
                                 "--secret-file", "/nonexistent/secret"},
                                {}, kLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "--secret-file /nonexistent/secret: cannot open it"), 1)
      << describe(r);
}

TEST(SluiceRegistryTest, SecretOnTheCommandLineStillWorksButWarns) {
  LiveProcess p({bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", "1", "--secret",
                 "hunter2hunter2"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.wait_for_output("SLUICE_REGISTRY=", seconds(10))) << p.output();
  p.signal(SIGINT);
  proc::ExitStatus status;
  ASSERT_TRUE(p.wait_exit(seconds(10), &status)) << p.output();
  EXPECT_EQ(status.exit_code, 0) << "signal " << status.term_signal << ": " << p.output();
  EXPECT_EQ(p.output().find("hunter2"), std::string::npos) << p.output();
  EXPECT_EQ(p.output().find("SLUICE_SECRET="), std::string::npos) << p.output();
  EXPECT_EQ(
      count_lines_with(p.output(), "warning: --secret puts the job secret on the command line"), 1)
      << p.output();
}

TEST(SluiceRegistryTest, RejectsZeroRanksAndABadPort) {
  ProcessResult r =
      run_process({bin("sluice"), "registry", "--bind", "127.0.0.1", "--world", "0"}, {}, kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "--world 0"), 1) << describe(r);

  r = run_process({bin("sluice"), "registry", "--bind", "127.0.0.1:99999", "--world", "2"}, {},
                  kLimit);
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "port '99999'"), 1) << describe(r);

  r = run_process({bin("sluice"), "registry", "--bind", "127.0.0.1:0", "--world", "2",
                   "--peer-timeout-ms", "99"},
                  {}, kLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "--peer-timeout-ms 99: expected 100 to 3600000 ms"), 1)
      << describe(r);
}

TEST(SluiceVersionTest, PrintsLibraryAndProtocolVersions) {
  ProcessResult r = run_process({bin("sluice"), "version"}, {}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.output, std::string("sluice ") + kVersion + " (control protocol " +
                          std::to_string(kProtocolVersion) + ")\ntest hooks: off\n");
}

// The library the tool links is the installed one: its test hooks are off
// whatever the environment says (they made an ordinary program exit with 17).
TEST(SluiceVersionTest, TheInstalledLibraryIgnoresTestHooks) {
  ProcessResult r = run_process(
      {bin("sluice"), "version"},
      {{"SLUICE_TEST_DIE_AFTER_SEQUENCE", "1"}, {"SLUICE_OFI_TEST_UNORDERED", "1"}}, kLimit);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "test hooks: off"), 1) << describe(r);
}

}  // namespace
}  // namespace sluice
