// Helpers for tests that run real programs: where the built binaries are, and
// running a command with a time limit while capturing its output.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace sluice::testing {

// Absolute path of a program built into the build tree's bin/ directory.
std::string bin(const std::string& name);

struct ProcessResult {
  int exit_code = -1;    // exit status if the process exited, else -1
  int term_signal = 0;   // signal number if it was killed by one
  bool timed_out = false;  // killed by run_process because the limit passed
  std::string output;    // stdout and stderr, interleaved as written
  double seconds = 0;    // wall time until it ended
};

// Runs argv[0] (a path) with argv, the current environment plus `env`, no
// stdin, and kills it (and its process group) if it runs longer than `limit`.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::milliseconds limit = std::chrono::seconds(120));

// Names of /dev/shm entries containing "sluice".
std::vector<std::string> sluice_shm_entries();

// The stacks of every thread of every process in process group `pgid`, as
// gdb prints them ("thread apply all bt"), for the failure message of a
// process that timed out: a hang in CI is then diagnosable from its log.
// Empty-handed (with the reason) where gdb is missing or cannot attach.
std::string stacks_of_group(int pgid);

// Number of lines of `text` that contain `needle`.
int count_lines_with(const std::string& text, const std::string& needle);

}  // namespace sluice::testing
