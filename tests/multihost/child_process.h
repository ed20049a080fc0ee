// A long-running child process for the multihost tests: started with an
// explicit argv and environment, its stdout and stderr collected in the
// background so that the test can wait for a line (the registry's address),
// wait for the exit with a deadline, or stop it (SIGTERM, then SIGKILL).
//
// Unlike testing::run_process, several of these run at once (a registry and
// one rank per host), and the test reads from them while they run.
//
// Thread safety: the methods may be called from any thread; one thread at a
// time should wait on a given child.
// Ownership: the object owns the process and its process group. The
// destructor stops the process if it is still running, so a failed test
// leaves no stray ranks or registries behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace sluice::testing {

using Clock = std::chrono::steady_clock;

class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv` and exactly `env` (NAME=value
  // entries), stdin from /dev/null, in its own process group (through
  // proc::Process::spawn). An exec failure shows as exit code 127 with the
  // reason in the output.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits until the output so far matches `re`, and returns the match's
  // first group (or the whole match if `re` has no group). nullopt if the
  // deadline passed or the process ended without printing it.
  std::optional<std::string> wait_for_output(const std::regex& re, Clock::time_point deadline);

  // Waits for the process to end; at `deadline` kills its process group with
  // SIGKILL (result.timed_out is then true) and waits for that.
  ProcessResult wait(Clock::time_point deadline);

  // SIGTERM, `grace` to end, then SIGKILL. Returns how it ended.
  ProcessResult stop(std::chrono::milliseconds grace);

  // Everything it has printed so far.
  std::string output() const;

 private:
  void read_output();                   // the reader thread
  void signal_group(int sig);           // REQUIRES: mu_ held
  ProcessResult result_locked() const;  // REQUIRES: mu_ held

  pid_t pid_ = -1;
  int out_fd_ = -1;   // read end of the child's stdout+stderr
  int wake_fd_ = -1;  // eventfd: tells the reader to give up on the pipe
  Clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::string output_;      // guarded by mu_
  bool reaped_ = false;     // guarded by mu_; once true, pid_ may name another process
  int status_ = 0;          // guarded by mu_; waitpid status once reaped_
  bool timed_out_ = false;  // guarded by mu_
  double seconds_ = 0;      // guarded by mu_
  std::thread reader_;
};

}  // namespace sluice::testing
