// tools/common/process.h: the one helper the tools and the tests start
// processes with.
#include "process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace sluice::proc {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ProcessTest, CapturesStdoutAndStderrAndTheExitCode) {
  ProcessResult r = run_process({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("out\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("err\n"), std::string::npos) << r.output;
}

TEST(ProcessTest, PassesExtraEnvironmentOnTopOfOwn) {
  ProcessResult r =
      run_process({"/bin/sh", "-c", "echo \"[$SLUICE_PROCESS_TEST] [${PATH:+path}]\""},
                  {{"SLUICE_PROCESS_TEST", "x y"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[x y] [path]"), std::string::npos) << r.output;
}

TEST(ProcessTest, ReportsAMissingProgramAsSpawnErrorWith127) {
  SpawnOptions o;
  o.argv = {"/nonexistent/sluice-no-such-program"};
  try {
    Process::spawn(o);
    FAIL() << "spawn of a missing program returned";
  } catch (const SpawnError& e) {
    EXPECT_EQ(e.exit_status(), 127);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sluice-no-such-program"), std::string::npos)
        << e.what();
  }
  ProcessResult r = run_process({"/nonexistent/sluice-no-such-program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.output.find("sluice-no-such-program"), std::string::npos) << r.output;
}

TEST(ProcessTest, FindsAProgramInPathLikeExecvp) {
  std::string error;
  int status = 0;
  EXPECT_TRUE(find_program("sh", &error, &status).has_value()) << error;
  EXPECT_FALSE(find_program("sluice-no-such-program", &error, &status).has_value());
  EXPECT_EQ(status, 127);
  EXPECT_NE(error.find("in PATH"), std::string::npos) << error;
}

TEST(ProcessTest, KillsTheWholeGroupAtTheLimitAndSaysItTimedOut) {
  // A child of the child holds the output pipe open too: the kill must reach it.
  ProcessResult r = run_process({"/bin/sh", "-c", "sleep 60 & sleep 60"}, {}, milliseconds(300));
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  // Not the 60 s of the sleeps; gdb's stack dump of each process is included.
  EXPECT_LT(r.seconds, 55) << r.output;
  EXPECT_TRUE(r.output.find("--- stacks of pid") != std::string::npos ||
              r.output.find("gdb is not installed") != std::string::npos)
      << r.output;
}

TEST(ProcessTest, WaitOrKillReturnsTheStatusOrKillsAtTheDeadline) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "exit 5"};
  Process quick = Process::spawn(o);
  bool timed_out = true;
  EXPECT_EQ(quick.wait_or_kill(Clock::now() + seconds(30), &timed_out).exit_code, 5);
  EXPECT_FALSE(timed_out);
  EXPECT_FALSE(quick.running());

  o.argv = {"/bin/sleep", "60"};
  Process slow = Process::spawn(o);
  const ExitStatus s = slow.wait_or_kill(Clock::now() + milliseconds(100), &timed_out);
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(s.term_signal, SIGKILL);
  EXPECT_EQ(s.shell_status(), 128 + SIGKILL);
}

TEST(ProcessTest, PipesStdoutOnlyWhenAsked) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo hello"};
  o.out = Output::kPipe;
  Process p = Process::spawn(o);
  ASSERT_TRUE(p.out().valid());
  EXPECT_FALSE(p.err().valid());
  char buf[16] = {};
  EXPECT_EQ(::read(p.out().get(), buf, sizeof buf), 6);
  EXPECT_EQ(std::string(buf), "hello\n");
  EXPECT_EQ(p.wait_or_kill(Clock::now() + seconds(30)).exit_code, 0);
}

}  // namespace
}  // namespace sluice::proc
