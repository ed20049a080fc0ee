// Starting and watching child processes: the one fork/exec helper that
// `sluice run`, `sluice-perf` and the tests share (internal; not installed).
//
// spawn() prepares everything before fork() (argv, environment, pipes), so
// the child only makes async-signal-safe calls and it is safe to call from a
// process with threads. An exec failure is reported to the parent through a
// close-on-exec pipe, so spawn() either returns a running child or throws
// SpawnError with the reason; nothing has to parse "exit status 127".
//
// Thread safety: every function may be called from any thread. A Process is
// owned by one thread at a time.
// Ownership: a Process owns its pid until it is reaped (wait_until, or the
// destructor, which kills the process group with SIGKILL and reaps it) and
// the read ends of any pipes it was started with.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sluice::proc {

using Clock = std::chrono::steady_clock;

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// What a child's stdout or stderr is connected to.
enum class Output {
  kInherit,   // this process's own (default)
  kPipe,      // a pipe whose read end Process holds
  kToStdout,  // stderr only: the same as the child's stdout (merged)
};

struct SpawnOptions {
  // The program and its arguments. argv[0] is a path, or (search_path) a
  // name looked up in PATH as execvp would, before fork. REQUIRES: not empty.
  std::vector<std::string> argv;
  bool search_path = false;
  // The child's exact environment (NAME=value); nullopt: this process's.
  std::optional<std::vector<std::string>> env;
  // stdin from /dev/null (default) rather than this process's.
  bool stdin_null = true;
  Output out = Output::kInherit;
  Output err = Output::kInherit;
  // Own process group (default), so that signal_group() reaches helpers the
  // child starts.
  bool new_process_group = true;
  // SIGKILL the child when this thread's process dies (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
  // The child's signal mask; nullopt: inherited. Signals this process has
  // set to SIG_IGN are reset to SIG_DFL for `reset_signals`.
  std::optional<sigset_t> signal_mask;
  std::vector<int> reset_signals;
  // Mark every fd above 2 close-on-exec in the child (close_range), so it
  // inherits none of this process's sockets and other children's pipes.
  bool close_other_fds = false;
};

// spawn() could not start the program. what() says which program and why
// ("cannot find program 'x' in PATH (...)", "exec of '/a/b' failed: ...").
class SpawnError : public std::runtime_error {
 public:
  SpawnError(const std::string& what, int error, int exit_status)
      : std::runtime_error(what), error_(error), exit_status_(exit_status) {}
  int error() const { return error_; }  // errno
  // What a shell would exit with: 127 not found, 126 not executable, 1 other.
  int exit_status() const { return exit_status_; }

 private:
  int error_;
  int exit_status_;
};

// How a process ended, decoded from a wait status.
struct ExitStatus {
  int exit_code = -1;   // exit status if it exited, else -1
  int term_signal = 0;  // signal number if a signal killed it
  // The shell's convention: exit_code, or 128 + term_signal.
  int shell_status() const { return exit_code >= 0 ? exit_code : 128 + term_signal; }
};
ExitStatus decode_wait_status(int status);

class Process {
 public:
  Process() = default;
  // Starts the program. Throws SpawnError if it cannot (the program is
  // missing or not executable, or pipe/fork/exec failed).
  static Process spawn(const SpawnOptions& options);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // A child not reaped yet is killed (its group, SIGKILL) and reaped.
  ~Process();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }
  // The read ends of the pipes (Output::kPipe); invalid otherwise.
  Fd& out() { return out_; }
  Fd& err() { return err_; }

  // Sends `sig` to the process group (new_process_group) and the process,
  // unless it has been reaped (its pid could name another process by now).
  void signal_group(int sig);

  // Reaps the process if it has ended, without blocking.
  std::optional<ExitStatus> try_wait();
  // Waits until it ends or `deadline` passes; nullopt at the deadline (the
  // process is left running).
  std::optional<ExitStatus> wait_until(Clock::time_point deadline);
  // Waits until `deadline`, then kills the group with SIGKILL and reaps it.
  // timed_out (if given) tells which happened.
  ExitStatus wait_or_kill(Clock::time_point deadline, bool* timed_out = nullptr);
  // SIGTERM to the group, `grace` to end, then SIGKILL.
  ExitStatus stop(std::chrono::milliseconds grace);
  // Forgets the pid without reaping it (the caller reaps it itself).
  pid_t release();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  bool group_ = false;
  ExitStatus status_;
  Fd out_;
  Fd err_;
};

// Finds `program` the way execvp would. Returns its path, or nullopt with
// `error` (what to tell the user) and `status` (127 not found, 126 not
// executable) set.
std::optional<std::string> find_program(const std::string& program, std::string* error,
                                        int* status);

// This process's environment with `set` applied, minus every variable whose
// name starts with one of `drop_prefixes` (unless `set` names it).
std::vector<std::string> environment_with(const std::map<std::string, std::string>& set,
                                          const std::vector<std::string>& drop_prefixes = {});

// The path of this process's own executable (/proc/self/exe). Throws
// std::runtime_error if it cannot be read.
std::string self_exe();

struct ProcessResult {
  int exit_code = -1;      // exit status if the process exited, else -1
  int term_signal = 0;     // signal number if it was killed by one
  bool timed_out = false;  // killed by run_process because the limit passed
  std::string output;      // stdout and stderr, interleaved as written
  double seconds = 0;      // wall time until it ended
};

// Runs argv[0] (a path) with argv, the current environment plus `env`, no
// stdin, no blocked signals and SIGPIPE at its default, in its own process
// group, capturing stdout and stderr together.
// After `limit` the output gains the stacks of the group (stacks_of_group)
// and the group is killed. An exec failure is exit code 127 with the reason
// in the output.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::milliseconds limit = std::chrono::seconds(120));

// The stacks of every thread of every process in process group `pgid`, as
// gdb prints them ("thread apply all bt"), for the report of a process that
// timed out: a hang in CI is then diagnosable from its log. Empty-handed
// (with the reason) where gdb is missing or cannot attach.
std::string stacks_of_group(pid_t pgid);

}  // namespace sluice::proc
