// Fault injection from outside by the launcher: `sluice run --kill
// RANK@SECONDS` and `--stop RANK@SECONDS:DURATION`, counted from the moment
// every rank joined the job's registry, so that no rank knows in advance
// which rank fails or when. The parsing of the two options, and jobs of
// sluice-test-fault-rank (fault_rank.cc: joins, waits, prints how long it was
// stopped). Timings are checked only against generous bounds.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run.h"
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
using tool::Fault;
using tool::fault_text;
using tool::KillAt;
using tool::parse_fault;
using tool::parse_kill_at;

// Every job here takes a few seconds; a loaded machine may take several times as long.
constexpr milliseconds kLauncherLimit = seconds(90);

// Where `text` first appears in `output`, or npos.
size_t position(const std::string& output, const std::string& text) { return output.find(text); }

// `sluice run` with `launcher`'s options on the shell script `script`,
// which must succeed and print the line `said` once.
ProcessResult run_sh(std::vector<std::string> launcher, const std::string& script,
                     const std::string& said) {
  launcher.insert(launcher.end(), {"--", "/bin/sh", "-c", script});
  ProcessResult r = run_process(run_argv(std::move(launcher)), {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, said), 1) << said << "\n" << describe(r);
  return r;
}

// That `first` and then `second` appear in the job's output.
void expect_in_order(const ProcessResult& r, const std::string& first, const std::string& second) {
  const size_t a = position(r.output, first);
  const size_t b = position(r.output, second);
  ASSERT_NE(a, std::string::npos) << first << "\n" << describe(r);
  ASSERT_NE(b, std::string::npos) << second << "\n" << describe(r);
  EXPECT_LT(a, b) << describe(r);
}

TEST(ParseFaultTest, AcceptsRankAtSecondsAndForStopADuration) {
  std::string error;
  std::optional<Fault> f = parse_fault(Fault::Kind::kKill, "2@1.5", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->kind, Fault::Kind::kKill);
  EXPECT_EQ(f->rank, 2u);
  EXPECT_DOUBLE_EQ(f->at_seconds, 1.5);
  EXPECT_EQ(f->duration_seconds, 0);

  f = parse_fault(Fault::Kind::kKill, "0@0", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->rank, 0u);
  EXPECT_EQ(f->at_seconds, 0);

  f = parse_fault(Fault::Kind::kStop, "1@0.3:0.5", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->kind, Fault::Kind::kStop);
  EXPECT_EQ(f->rank, 1u);
  EXPECT_DOUBLE_EQ(f->at_seconds, 0.3);
  EXPECT_DOUBLE_EQ(f->duration_seconds, 0.5);

  f = parse_fault(Fault::Kind::kStop, "12@3:1e-1", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->rank, 12u);
  EXPECT_DOUBLE_EQ(f->duration_seconds, 0.1);
}

TEST(ParseFaultTest, FaultTextGivesTheOptionBack) {
  std::string error;
  EXPECT_EQ(fault_text(*parse_fault(Fault::Kind::kKill, "2@1.5", &error)), "--kill 2@1.5");
  EXPECT_EQ(fault_text(*parse_fault(Fault::Kind::kStop, "1@0.3:0.5", &error)), "--stop 1@0.3:0.5");
  EXPECT_EQ(fault_text(*parse_fault(Fault::Kind::kLeave, "1@2", &error)), "--leave 1@2");
  EXPECT_EQ(fault_text(*parse_fault(Fault::Kind::kKill, "2@1 after flow 'e1' started", &error)),
            "--kill 2@1 after 'flow 'e1' started'");
}

TEST(ParseFaultTest, AFaultAfterATextKeepsTheTextWhole) {
  std::string error;
  std::optional<Fault> f =
      parse_fault(Fault::Kind::kKill, "2@1.5 after checkpoint 3: done", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->rank, 2u);
  EXPECT_DOUBLE_EQ(f->at_seconds, 1.5);
  EXPECT_EQ(f->after, "checkpoint 3: done");
  f = parse_fault(Fault::Kind::kStop, "1@0.3:0.5 after phase 2", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_DOUBLE_EQ(f->duration_seconds, 0.5);
  EXPECT_EQ(f->after, "phase 2");
  f = parse_fault(Fault::Kind::kKill, "1@0", &error);
  ASSERT_TRUE(f) << error;
  EXPECT_EQ(f->after, "");
}

TEST(ParseFaultTest, RejectsMalformedValuesWithAMessageNamingThem) {
  struct Case {
    Fault::Kind kind;
    const char* text;
    const char* message;  // what the error must contain
  };
  const Case cases[] = {
      {Fault::Kind::kKill, "1", "--kill '1': no '@'"},
      {Fault::Kind::kKill, "", "--kill '': no '@'"},
      {Fault::Kind::kKill, "@1", "--kill '@1': no RANK before '@'"},
      {Fault::Kind::kKill, "-1@1", "RANK '-1' is not a rank number"},
      {Fault::Kind::kKill, "+1@1", "RANK '+1' is not a rank number"},
      {Fault::Kind::kKill, "one@1", "RANK 'one' is not a rank number"},
      {Fault::Kind::kKill, "1x@1", "RANK '1x' is not a rank number"},
      {Fault::Kind::kKill, "99999999999@1", "RANK '99999999999' is not a rank number"},
      {Fault::Kind::kKill, "1@", "SECONDS '' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@-0.5", "SECONDS '-0.5' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@soon", "SECONDS 'soon' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@ 2", "SECONDS ' 2' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@2s", "SECONDS '2s' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@inf", "SECONDS 'inf' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@nan", "SECONDS 'nan' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@1@2", "SECONDS '1@2' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@1:2", "--kill '1@1:2': a ':DURATION' is for --stop only"},
      {Fault::Kind::kStop, "1@2", "--stop '1@2': no ':DURATION' after SECONDS"},
      {Fault::Kind::kStop, "1@-2:1", "SECONDS '-2' is not a number of seconds >= 0"},
      {Fault::Kind::kStop, "1@2:0", "DURATION '0' is not a number of seconds > 0"},
      {Fault::Kind::kStop, "1@2:-1", "DURATION '-1' is not a number of seconds > 0"},
      {Fault::Kind::kStop, "1@2:", "DURATION '' is not a number of seconds > 0"},
      {Fault::Kind::kStop, "1@2:1:1", "DURATION '1:1' is not a number of seconds > 0"},
      {Fault::Kind::kStop, "x@2:1", "RANK 'x' is not a rank number"},
      {Fault::Kind::kLeave, "1", "--leave '1': no '@'"},
      {Fault::Kind::kLeave, "1@2:1", "--leave '1@2:1': a ':DURATION' is for --stop only"},
      {Fault::Kind::kKill, "1@2 after ", "--kill '1@2 after ': no TEXT after ' after '"},
      {Fault::Kind::kKill, "1@ after x", "SECONDS '' is not a number of seconds >= 0"},
      {Fault::Kind::kKill, "1@2 later", "SECONDS '2 later' is not a number of seconds >= 0"},
      {Fault::Kind::kStop, "1@2 after x", "--stop '1@2 after x': no ':DURATION' after SECONDS"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_FALSE(parse_fault(c.kind, c.text, &error)) << c.text;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.text << ": " << error;
    // Every message says what the value should look like.
    const char* form = c.kind != Fault::Kind::kStop ? "expected RANK@SECONDS (e.g. 2@1.5)"
                                                    : "expected RANK@SECONDS:DURATION";
    EXPECT_NE(error.find(form), std::string::npos) << c.text << ": " << error;
  }
  EXPECT_FALSE(parse_fault(Fault::Kind::kKill, "junk", nullptr));  // no message wanted
}

TEST(ParseKillAtTest, AcceptsRankNameAndAPassAndRejectsAnythingElseNamingIt) {
  std::string error;
  std::optional<KillAt> k = parse_kill_at("1:kv-paxos-after-accept", &error);
  ASSERT_TRUE(k) << error;
  EXPECT_EQ(k->rank, 1u);
  EXPECT_EQ(k->name, "kv-paxos-after-accept");
  EXPECT_EQ(k->pass, 1u);
  k = parse_kill_at("12:a.b_C-9:40", &error);
  ASSERT_TRUE(k) << error;
  EXPECT_EQ(k->rank, 12u);
  EXPECT_EQ(k->name, "a.b_C-9");
  EXPECT_EQ(k->pass, 40u);
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"1", "found no ':'"},
      {"x:name", "RANK is not a number"},
      {":name", "RANK is not a number"},
      {"1:", "NAME must be letters"},
      {"1:na me", "NAME must be letters"},
      {"1:name:0", "K is not a number >= 1"},
      {"1:name:", "K is not a number >= 1"},
      {"1:name:2:3", "K is not a number >= 1"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(parse_kill_at(c.text, &error)) << c.text;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.text << ": " << error;
    EXPECT_NE(error.find("expected RANK:NAME[:K]"), std::string::npos) << c.text << ": " << error;
  }
}

// --kill-at arms the named rank's first process alone: the restarted one,
// and every other rank, get SLUICE_TEST_KILL_AT empty (over an inherited one).
TEST(SluiceRunFaultTest, KillAtArmsOnlyTheFirstProcessOfItsRank) {
  const std::string script =
      "echo \"rank $SLUICE_RANK kill_at=[$SLUICE_TEST_KILL_AT]\"; "
      "[ -n \"$SLUICE_TEST_KILL_AT\" ] && exit 3; exit 0";
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--restarts", "1", "--kill-at", "1:p:3", "--", "sh", "-c", script}),
      {{"SLUICE_TEST_KILL_AT", "inherited:1"}}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 kill_at=[p:3]"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 kill_at=[]"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[0] rank 0 kill_at=[]"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: starting rank 1 again"), 1) << describe(r);

  r = run_process(run_argv({"-n", "3", "--kill-at", "5:p", "--", "/bin/true"}), {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "--kill-at 5:p: there is no rank 5 in a job of 3"), 1)
      << describe(r);
  r = run_process(run_argv({"-n", "3", "--kill-at", "1:p", "--kill-at", "1:q", "--", "/bin/true"}),
                  {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "rank 1 already has a kill point"), 1) << describe(r);
}

TEST(SluiceRunFaultTest, RejectsAFaultForARankTheJobLacksBeforeStartingAnything) {
  ProcessResult r = run_process(run_argv({"-n", "3", "--kill", "5@1", "--", "/bin/true"}),
                                {{"SLUICE_LOG", "info"}}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --kill 5@1: there is no rank 5 in a job of 3 "
                             "ranks (0..2)"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "registry at"), 0) << "nothing started: " << describe(r);

  r = run_process(run_argv({"-n", "3", "--stop", "3@1:1", "--", "/bin/true"}), {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "--stop 3@1:1: there is no rank 3"), 1) << describe(r);
}

TEST(SluiceRunFaultTest, RejectsAMalformedFaultNamingIt) {
  ProcessResult r =
      run_process(run_argv({"-n", "2", "--kill", "1@soon", "--", "/bin/true"}), {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: --kill '1@soon': SECONDS 'soon' is not"), 1)
      << describe(r);

  r = run_process(run_argv({"-n", "2", "--stop", "1@2", "--", "/bin/true"}), {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: --stop '1@2': no ':DURATION'"), 1)
      << describe(r);
}

// A program that never joins the registry never starts the job as far as
// faults are concerned: nothing is injected, and the launcher says why.
TEST(SluiceRunFaultTest, InjectsNothingIntoAJobWhoseRanksNeverJoin) {
  ProcessResult r = run_process(run_argv({"-n", "2", "--timeout", "2", "--kill", "1@0.1", "--stop",
                                          "0@0:0.2", "--", "/bin/sleep", "30"}),
                                {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 124) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "injecting"), 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "was killed by signal 9"), 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --kill 1@0.1 was not injected: the job never "
                             "started (0 of 2 ranks joined its registry"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: --stop 0@0:0.2 was not injected"), 1)
      << describe(r);
}

// --faults-after: the faults' clock starts at the first line any rank prints
// that contains the text (no rank joins here: the clock needs none), and
// the kill lands after that line; a text nobody prints injects nothing and
// says so; the option alone, with no fault to time, is a usage error.
TEST(SluiceRunFaultTest, FaultsAfterCountsFromTheFirstLineThatContainsTheText) {
  const std::string script = "sleep 0.5; echo phase two begins; sleep 3";
  ProcessResult r =
      run_sh({"-n", "2", "--keep-going", "--faults-after", "phase two", "--kill", "1@0"}, script,
             "sluice run: a rank printed 'phase two'; --kill, --stop and "
             "--join count from now");
  expect_in_order(r, "phase two begins", "sluice run: injecting --kill 1@0: SIGKILL to rank 1");

  r = run_process(run_argv({"-n", "2", "--faults-after", "never printed", "--kill", "1@0", "--",
                            "/bin/sh", "-c", "echo something else"}),
                  {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "injecting"), 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --kill 1@0 was not injected: no rank printed a line "
                             "containing 'never printed' (--faults-after)"),
            1)
      << describe(r);

  r = run_process(run_argv({"-n", "2", "--faults-after", "x", "--", "/bin/true"}), {},
                  kLauncherLimit);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --faults-after 'x' starts the clock of --kill, "
                             "--stop and --join, and there is none"),
            1)
      << describe(r);
}

// A fault "after TEXT" counts from the first line containing TEXT once the
// faults' clock started (a line before it does not count), and is reported
// as not injected when no such line comes.
TEST(SluiceRunFaultTest, AFaultAfterATextCountsFromItsOwnLine) {
  // (Rank 0 alone prints, so that its lines reach the launcher in order.)
  const std::string script =
      "if [ \"$SLUICE_RANK\" = 0 ]; then echo phase three early; echo go; sleep 0.5; "
      "echo phase three now; fi; sleep 3";
  ProcessResult r =
      run_sh({"-n", "2", "--keep-going", "--faults-after", "go", "--kill", "1@0 after phase three"},
             script,
             "sluice run: a rank printed 'phase three'; --kill 1@0 after 'phase three' counts "
             "from now");
  expect_in_order(r, "phase three now", "sluice run: injecting --kill 1@0 after 'phase three'");

  r = run_process(run_argv({"-n", "2", "--faults-after", "go", "--kill", "1@0 after never printed",
                            "--", "/bin/sh", "-c", "echo go"}),
                  {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "injecting"), 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --kill 1@0 after 'never printed' was not "
                             "injected: no rank printed a line containing 'never "
                             "printed'"),
            1)
      << describe(r);
}

// The README's case for --keep-going: the others run on without the rank
// the launcher killed, and since that death was asked for, the job succeeds.
TEST(SluiceRunFaultTest, KillWithKeepGoingKillsTheRankAndTheJobStillSucceeds) {
  ProcessResult r = run_process(run_argv({"-n", "3", "--keep-going", "--kill", "1@0.5", "--",
                                          bin("sluice-test-fault-rank"), "--seconds", "3"}),
                                {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(
      count_lines_with(r.output, "sluice run: injecting --kill 1@0.5: SIGKILL to rank 1 (pid "), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: rank 1 was killed by signal 9 (SIGKILL), as injected "
                             "(--kill)"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "the other ranks go on without rank 1 (--keep-going)"), 1)
      << describe(r);
  // Rank 1 had joined (the job started), and died before it was done.
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 joined as incarnation 0"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 (incarnation 0) done"), 0) << describe(r);
  for (const char* line : {"[0] rank 0 (incarnation 0) done", "[2] rank 2 (incarnation 0) done"}) {
    EXPECT_EQ(count_lines_with(r.output, line), 1) << line << ": " << describe(r);
    // Killed about 0.5 s after the start: well before the others' 3 s were up.
    EXPECT_LT(position(r.output, "injecting --kill"), position(r.output, line)) << describe(r);
  }
  EXPECT_EQ(count_lines_with(r.output, "SIGTERM"), 0) << describe(r);
}

// Without --keep-going the kill is a failure like a crash: the others get
// the grace period, then SIGTERM, and those deaths are the job's failure.
TEST(SluiceRunFaultTest, KillWithoutKeepGoingStopsTheOthersAfterTheGraceAndFails) {
  ProcessResult r = run_process(run_argv({"-n", "3", "--grace", "0.5", "--kill", "1@0.5", "--",
                                          bin("sluice-test-fault-rank"), "--seconds", "60"}),
                                {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: injecting --kill 1@0.5: SIGKILL to rank 1"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "ranks 0,2 still running 0.5 s after rank 1 failed; sending "
                             "SIGTERM"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, ") done"), 0) << describe(r);
  EXPECT_LT(r.seconds, 45) << "the ranks were to wait 60 s: " << describe(r);
}

// With --restarts the killed rank is started again, rejoins as incarnation
// 1 and finishes; the job succeeds.
TEST(SluiceRunFaultTest, KillWithRestartsStartsTheRankAgainAndTheJobSucceeds) {
  ProcessResult r = run_process(run_argv({"-n", "2", "--restarts", "1", "--kill", "1@0.3", "--",
                                          bin("sluice-test-fault-rank"), "--seconds", "2"}),
                                {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: injecting --kill 1@0.3: SIGKILL to rank 1"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: starting rank 1 again (restart 1 of 1)"), 1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 joined as incarnation 1"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 (incarnation 1) done"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[0] rank 0 (incarnation 0) done"), 1) << describe(r);
}

// A fault that comes due when its rank has already exited is skipped, and
// the job's status is the ranks' own.
TEST(SluiceRunFaultTest, SkipsAKillWhoseRankHasExited) {
  ProcessResult r = run_process(
      run_argv({"-n", "2", "--kill", "1@1.5", "--", "/bin/sh", "-c",
                "if [ $SLUICE_RANK = 1 ]; then s=0; else s=4; fi; exec \"$0\" --seconds $s",
                bin("sluice-test-fault-rank")}),
      {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[1] rank 1 (incarnation 0) done"), 1) << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: --kill 1@1.5 skipped: rank 1 is not running (it exited)"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "injecting"), 0) << describe(r);
}

// --stop holds the rank for the duration and lets it go on: the rank sees a
// pause at least that long, and the job succeeds.
TEST(SluiceRunFaultTest, StopPausesTheRankForTheDurationAndTheJobSucceeds) {
  ProcessResult r = run_process(run_argv({"-n", "3", "--stop", "1@0.3:0.5", "--",
                                          bin("sluice-test-fault-rank"), "--seconds", "2.5"}),
                                {}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(
      count_lines_with(r.output, "sluice run: injecting --stop 1@0.3:0.5: SIGSTOP to rank 1 (pid "),
      1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: --stop 1@0.3:0.5: SIGCONT to rank 1 (pid "), 1)
      << describe(r);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(\[1\] rank 1 \(incarnation 0\) done, longest pause (\d+) ms)")))
      << describe(r);
  EXPECT_GE(std::stoi(m[1]), 400) << "rank 1 was stopped for 0.5 s: " << describe(r);
  for (const char* line : {"[0] rank 0 (incarnation 0) done", "[2] rank 2 (incarnation 0) done"})
    EXPECT_EQ(count_lines_with(r.output, line), 1) << line << ": " << describe(r);
}

// Stopped past the peer timeout, the rank stops heart-beating: the silent-
// rank logic kills it (about 2 s in), a failure of its own that counts, and
// the SIGCONT due 4 s in is skipped (rank 0 keeps the job going for 6 s).
TEST(SluiceRunFaultTest, StopPastThePeerTimeoutKillsTheRankAsSilentAndCounts) {
  ProcessResult r = run_process(run_argv({"-n", "2", "--keep-going", "--stop", "1@0.2:4", "--",
                                          bin("sluice-test-fault-rank"), "--seconds", "6"}),
                                {{"SLUICE_PEER_TIMEOUT_MS", "2000"}}, kLauncherLimit);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: injecting --stop 1@0.2:4: SIGSTOP to rank 1"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output,
                             "sluice run: rank 1 stopped heart-beating (no heartbeat for "
                             "2000 ms; stopped or hung); killing it with SIGKILL"),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "sluice run: --stop 1@0.2:4: SIGCONT skipped: rank 1 (pid "),
            1)
      << describe(r);
  EXPECT_EQ(count_lines_with(r.output, "[0] rank 0 (incarnation 0) done"), 1) << describe(r);
}

}  // namespace
}  // namespace sluice
