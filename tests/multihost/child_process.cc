#include "multihost/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "process.h"
#include "support/test_support.h"

namespace sluice::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess: empty argv");
  proc::SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.out = proc::Output::kPipe;
  o.err = proc::Output::kToStdout;
  start_ = Clock::now();
  proc::Process child;
  try {
    child = proc::Process::spawn(o);
  } catch (const proc::SpawnError& e) {
    // As if it had run and failed: exit code 127 (or 126) with the reason.
    output_ = std::string(e.what()) + "\n";
    status_ = (e.exit_status() & 0xff) << 8;
    reaped_ = true;
    return;
  }
  out_fd_ = child.out().release();
  // The reader thread reaps it (under mu_, see read_output).
  pid_ = child.release();
  // A pidfd turns "the process ended" into something poll() can wait for
  // together with the pipe, so one thread needs no timeouts to notice either.
  wake_fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (wake_fd_ < 0) {
    const int err = errno;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(out_fd_);
    throw std::runtime_error(std::string("ChildProcess: pidfd_open: ") + std::strerror(err));
  }
  reader_ = std::thread([this] { read_output(); });
}

ChildProcess::~ChildProcess() {
  stop(std::chrono::seconds(5));
  if (reader_.joinable()) reader_.join();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ChildProcess::read_output() {
  char buf[65536];
  bool pipe_open = true;
  for (;;) {
    pollfd fds[2] = {{out_fd_, static_cast<short>(pipe_open ? POLLIN : 0), 0},
                     {wake_fd_, POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (fds[1].revents & POLLIN) break;  // the process ended
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        pipe_open = false;  // it closed its output; keep waiting for the exit
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      output_.append(buf, static_cast<size_t>(n));
      changed_.notify_all();
    }
  }
  // Whatever it wrote before exiting is in the pipe now. Writes by children it
  // left behind are not waited for: stop() kills the group anyway.
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  std::string tail;
  for (ssize_t n; pipe_open && (n = ::read(out_fd_, buf, sizeof(buf))) > 0;) {
    tail.append(buf, static_cast<size_t>(n));
  }
  // Reaped under the lock so that signal_group() never signals a pid that
  // has already been reused.
  std::lock_guard<std::mutex> lock(mu_);
  output_ += tail;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
  reaped_ = true;
  seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
  changed_.notify_all();
}

void ChildProcess::signal_group(int sig) {
  if (reaped_) return;
  ::kill(-pid_, sig);
  ::kill(pid_, sig);  // in case it left the group
}

ProcessResult ChildProcess::result_locked() const {
  ProcessResult r;
  if (WIFEXITED(status_)) r.exit_code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) r.term_signal = WTERMSIG(status_);
  r.timed_out = timed_out_;
  r.output = output_;
  r.seconds = seconds_;
  return r;
}

std::optional<std::string> ChildProcess::wait_for_output(const std::regex& re,
                                                         Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  std::smatch m;
  const bool found = changed_.wait_until(
      lock, deadline, [&] { return std::regex_search(output_, m, re) || reaped_; });
  if (!found || !std::regex_search(output_, m, re)) return std::nullopt;
  return m.size() > 1 ? m[1].str() : m[0].str();
}

ProcessResult ChildProcess::wait(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_until(lock, deadline, [&] { return reaped_; })) {
    timed_out_ = true;
    // gdb takes seconds per process: the reader thread keeps draining the
    // child's output meanwhile.
    lock.unlock();
    const std::string stacks = stacks_of_group(pid_);
    lock.lock();
    output_ += stacks;
    signal_group(SIGKILL);
    // SIGKILL cannot be ignored; the bound only guards against a process
    // stuck in the kernel.
    changed_.wait_for(lock, std::chrono::seconds(30), [&] { return reaped_; });
  }
  return result_locked();
}

ProcessResult ChildProcess::stop(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!reaped_) {
    signal_group(SIGTERM);
    if (!changed_.wait_for(lock, grace, [&] { return reaped_; })) {
      signal_group(SIGKILL);
      changed_.wait_for(lock, std::chrono::seconds(30), [&] { return reaped_; });
    }
  }
  return result_locked();
}

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> lock(mu_);
  return output_;
}

}  // namespace sluice::testing
