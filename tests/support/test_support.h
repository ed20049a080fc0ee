// Helpers for tests that run real programs: where the built binaries are, and
// running a command with a time limit while capturing its output.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "process.h"

namespace sluice::testing {

// Absolute path of a program built into the build tree's bin/ directory.
std::string bin(const std::string& name);

// The command line of a job: `sluice run -n ranks --stacks-on-timeout
// --timeout timeout_s [launcher_args...] -- bin(program) [program_args...]`.
// On a timeout the launcher prints every rank's stacks, so a hang in CI is
// placed by its log.
std::vector<std::string> job_argv(int ranks, int timeout_s, const std::string& program,
                                  const std::vector<std::string>& program_args = {},
                                  const std::vector<std::string>& launcher_args = {});

// The launcher options of a fault injected from outside, unannounced, at a
// line a rank prints: `--faults-after LINE --kill RANK@AFTER_S`, or with
// `stop` `--stop RANK@AFTER_S:60` (stopped long enough that the peer
// timeout finds it first).
std::vector<std::string> fault_at_line(const std::string& line, int rank, double after_s = 0,
                                       bool stop = false);

// Running a program with a time limit while capturing its output, and the
// gdb stacks of a process group that timed out: tools/common/process.h, the
// one process helper the tools and the tests share.
using proc::ProcessResult;
using proc::run_process;
using proc::stacks_of_group;

// A field of the (first) JSON object a job printed, as text: a string's
// contents, a number, or a flat object's braces and all; "" if absent. For
// the apps' `--json` lines, without parsing the launcher's other output.
std::string json_field(const std::string& output, const std::string& name);
// json_field as an unsigned number; all ones if absent.
uint64_t json_number(const std::string& output, const std::string& name);

// `sluice run ARGS...`: bin("sluice"), "run", then args.
std::vector<std::string> run_argv(std::vector<std::string> args);
// A finished process as a failure message shows it: exit status, signal,
// seconds, whether it timed out, and its output.
std::string describe(const ProcessResult& r);

// Names of /dev/shm entries containing "sluice".
std::vector<std::string> sluice_shm_entries();

// Number of lines of `text` that contain `needle`.
int count_lines_with(const std::string& text, const std::string& needle);
// The lines of `text` that warn or report an error: the library's log lines
// at level warn or error ("sluice[...] warn: ", "sluice[...] error: ") and an
// app's own "warning: " lines, one per line; "" if none. A clean run has none
// (a warning at a clean exit is a defect no other check sees).
std::string warning_lines(const std::string& text);
// Number of lines of `text` that contain every one of `needles`.
int count_lines_with_all(const std::string& text, const std::vector<std::string>& needles);

// The sum over keys of the last count `output` says for each: `pattern`
// matches a line's key (its first group) and count (its second), e.g. a
// reader's "caught up with X: N records read" said again as it goes on.
uint64_t sum_of_latest(const std::string& output, const std::string& pattern);

// A job started in the background (its stdout and stderr in one pipe),
// whose output a test reads while it runs: to wait for a line, then act
// (append to its input, signal it) and read on.
class BackgroundJob {
 public:
  explicit BackgroundJob(std::vector<std::string> argv);
  // Reads its output until pred(output) or `limit`; pred's last answer.
  bool read_until(const std::function<bool(const std::string&)>& pred, std::chrono::seconds limit);
  // SIGTERM (as Ctrl-C at sluice run), then its output to the end; true if
  // it exited within the time.
  bool stop();
  const std::string& output() const { return output_; }
  // How it ended, once stop() saw it end (the shell's convention: its exit
  // status, or 128 + the signal that killed it); -1 before.
  int exit_status() const { return exit_status_; }

 private:
  proc::Process job_;
  std::string output_;
  int exit_status_ = -1;
};

// True when the test runs over ofi (SLUICE_TRANSPORT=ofi, as the ctest
// variants set it): tests scale their sizes down on that slower path.
bool over_ofi();

}  // namespace sluice::testing
