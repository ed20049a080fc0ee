#include "process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace sluice::proc {
namespace {

void make_pipe(Fd* read_end, Fd* write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    const int e = errno;
    throw SpawnError(std::string("cannot create a pipe: ") + std::strerror(e) +
                         "; raise the open-file limit (ulimit -n)",
                     e, 1);
  }
  read_end->reset(p[0]);
  write_end->reset(p[1]);
}

// Everything the child needs, prepared before fork(): after fork() in a
// process with threads the child may only call async-signal-safe functions,
// so nothing is allocated there.
struct ExecPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  char** env = nullptr;
  pid_t parent = -1;
  int devnull = -1;
  int out_w = -1;
  int err_w = -1;
  int report_w = -1;
};

[[noreturn]] void exec_child(const SpawnOptions& o, const ExecPlan& plan) {
  auto fail = [&] {
    const int e = errno;
    (void)!::write(plan.report_w, &e, sizeof(e));
    ::_exit(127);
  };
  // Also done by the parent, to close the race with whoever signals the group first.
  if (o.new_process_group) ::setpgid(0, 0);
  if (o.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before prctl took effect.
    if (::getppid() != plan.parent) ::_exit(127);
  }
  for (int sig : o.reset_signals) ::signal(sig, SIG_DFL);
  if (o.signal_mask) ::sigprocmask(SIG_SETMASK, &*o.signal_mask, nullptr);
  if (plan.devnull >= 0 && ::dup2(plan.devnull, STDIN_FILENO) < 0) fail();
  if (plan.out_w >= 0 && ::dup2(plan.out_w, STDOUT_FILENO) < 0) fail();
  if (plan.err_w >= 0 && ::dup2(plan.err_w, STDERR_FILENO) < 0) fail();
  if (o.err == Output::kToStdout && ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0) fail();
  // Ignored on kernels without close_range; the parent's own fds are
  // O_CLOEXEC anyway.
  if (o.close_other_fds) ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
  ::execve(plan.path.c_str(), plan.argv.data(), plan.env);
  fail();
  ::_exit(127);  // not reached: fail() exits
}

}  // namespace

ExitStatus decode_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) s.term_signal = WTERMSIG(status);
  return s;
}

Process Process::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw SpawnError("spawn: no program given", EINVAL, 2);
  ExecPlan plan;
  if (o.search_path) {
    std::string error;
    int status = 127;
    std::optional<std::string> path = find_program(o.argv[0], &error, &status);
    if (!path) throw SpawnError(error, status == 127 ? ENOENT : EACCES, status);
    plan.path = *path;
  } else {
    plan.path = o.argv[0];
  }
  for (const std::string& a : o.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  if (o.env) {
    plan.env_storage = *o.env;
    for (std::string& e : plan.env_storage) plan.envp.push_back(e.data());
    plan.envp.push_back(nullptr);
    plan.env = plan.envp.data();
  } else {
    plan.env = environ;
  }

  Fd devnull, out_r, out_w, err_r, err_w, report_r, report_w;
  if (o.stdin_null) {
    devnull.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull.valid()) {
      const int e = errno;
      throw SpawnError(
          std::string("cannot open /dev/null for a child's stdin: ") + std::strerror(e), e, 1);
    }
  }
  if (o.out == Output::kPipe) make_pipe(&out_r, &out_w);
  if (o.err == Output::kPipe) make_pipe(&err_r, &err_w);
  make_pipe(&report_r, &report_w);
  plan.parent = ::getpid();
  plan.devnull = devnull.get();
  plan.out_w = out_w.get();
  plan.err_w = err_w.get();
  plan.report_w = report_w.get();

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    throw SpawnError("cannot fork to run '" + plan.path + "': " + std::strerror(e) +
                         "; check the process limit (ulimit -u) and free memory",
                     e, 1);
  }
  if (pid == 0) exec_child(o, plan);
  if (o.new_process_group) ::setpgid(pid, pid);  // fails harmlessly if the child already exec'd

  Process p;
  p.pid_ = pid;
  p.group_ = o.new_process_group;
  p.out_ = std::move(out_r);
  p.err_ = std::move(err_r);
  report_w.reset();
  out_w.reset();
  err_w.reset();
  // EOF means execve succeeded (the pipe is close-on-exec); an int is the
  // errno of a failed exec.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(report_r.get(), &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    // The child is exiting; reap it here so that nobody reports it again.
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    p.reaped_ = true;
    throw SpawnError("exec of '" + plan.path + "' failed: " + std::strerror(exec_errno), exec_errno,
                     exec_errno == ENOENT ? 127 : 126);
  }
  return p;
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      reaped_(other.reaped_),
      group_(other.group_),
      status_(other.status_),
      out_(std::move(other.out_)),
      err_(std::move(other.err_)) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    this->~Process();
    new (this) Process(std::move(other));
  }
  return *this;
}

Process::~Process() {
  if (!running()) return;
  signal_group(SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void Process::signal_group(int sig) {
  if (!running()) return;
  if (group_) ::kill(-pid_, sig);
  ::kill(pid_, sig);  // also in case it left the group
}

std::optional<ExitStatus> Process::try_wait() {
  if (reaped_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got != pid_) return std::nullopt;
  reaped_ = true;
  status_ = decode_wait_status(status);
  return status_;
}

std::optional<ExitStatus> Process::wait_until(Clock::time_point deadline) {
  for (;;) {
    if (std::optional<ExitStatus> s = try_wait()) return s;
    if (Clock::now() >= deadline || pid_ <= 0) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

ExitStatus Process::wait_or_kill(Clock::time_point deadline, bool* timed_out) {
  std::optional<ExitStatus> s = wait_until(deadline);
  if (timed_out != nullptr) *timed_out = !s;
  if (s) return *s;
  signal_group(SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  status_ = decode_wait_status(status);
  return status_;
}

ExitStatus Process::stop(std::chrono::milliseconds grace) {
  signal_group(SIGTERM);
  return wait_or_kill(Clock::now() + grace);
}

pid_t Process::release() {
  reaped_ = true;
  return std::exchange(pid_, -1);
}

std::optional<std::string> find_program(const std::string& program, std::string* error,
                                        int* status) {
  auto executable = [](const std::string& path, int* err) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      *err = errno;
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      *err = EISDIR;
      return false;
    }
    if (::access(path.c_str(), X_OK) != 0) {
      *err = errno;
      return false;
    }
    return true;
  };
  int err = 0;
  if (program.find('/') != std::string::npos) {
    if (executable(program, &err)) return program;
    *status = err == ENOENT || err == ENOTDIR ? 127 : 126;
    *error = "cannot run program '" + program + "': " + std::strerror(err) +
             (*status == 127 ? "; check the path" : "; check its permissions");
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  bool found_unusable = false;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (executable(candidate, &err)) return candidate;
    if (err != ENOENT && err != ENOTDIR) found_unusable = true;
    begin = end + 1;
  }
  *status = found_unusable ? 126 : 127;
  *error = found_unusable ? "cannot run program '" + program +
                                "': found in PATH but not executable; check its permissions"
                          : "cannot find program '" + program + "' in PATH (" + path +
                                "); check the spelling or give its path";
  return std::nullopt;
}

std::vector<std::string> environment_with(const std::map<std::string, std::string>& set,
                                          const std::vector<std::string>& drop_prefixes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (set.count(name) != 0) continue;
    bool drop = false;
    for (const auto& prefix : drop_prefixes) drop |= name.rfind(prefix, 0) == 0;
    if (!drop) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    throw std::runtime_error(std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds limit) {
  ProcessResult result;
  const auto start = Clock::now();
  SpawnOptions o;
  o.argv = argv;
  if (!env.empty()) o.env = environment_with(env);
  o.out = Output::kPipe;
  o.err = Output::kToStdout;
  // The child starts as from a shell, whatever the caller blocked or ignored
  // (the launcher blocks SIGCHLD, which gdb needs).
  sigset_t none;
  ::sigemptyset(&none);
  o.signal_mask = none;
  o.reset_signals = {SIGPIPE};
  Process p;
  try {
    p = Process::spawn(o);
  } catch (const SpawnError& e) {
    result.exit_code = e.exit_status();
    result.output = std::string(e.what()) + "\n";
    return result;
  }
  const int fd = p.out().get();
  const auto deadline = start + limit;
  char buf[65536];
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      result.output += stacks_of_group(p.pid());
      p.signal_group(SIGKILL);
      break;
    }
    pollfd pf{fd, POLLIN, 0};
    const int ms =
        static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) +
        1;
    const int r = ::poll(&pf, 1, ms);
    if (r <= 0) continue;  // EINTR, or the deadline: checked above
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed: the process (and its children) are done
    result.output.append(buf, static_cast<size_t>(n));
  }
  // Drain what is left after a kill.
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    result.output.append(buf, static_cast<size_t>(n));
  // Its output is closed (or it was killed): the exit is at most moments away.
  const ExitStatus s = p.wait_or_kill(Clock::now() + std::chrono::seconds(30));
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.exit_code = s.exit_code;
  result.term_signal = s.term_signal;
  return result;
}

std::string stacks_of_group(pid_t pgid) {
  static const char* const kGdb = "/usr/bin/gdb";
  if (::access(kGdb, X_OK) != 0)
    return "\n(no stacks of the timed-out processes: gdb is not installed)\n";
  std::vector<std::string> pids;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
      std::string line;
      std::getline(stat, line);
      // pid (comm) state ppid pgrp ...: comm may hold spaces, so parse after ')'.
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 1));
      std::string state;
      long ppid = 0, pgrp = 0;
      if (rest >> state >> ppid >> pgrp && pgrp == pgid) pids.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::string out;
  constexpr size_t kMostProcesses = 8;
  for (size_t i = 0; i < pids.size() && i < kMostProcesses; ++i) {
    ProcessResult r =
        run_process({kGdb, "-batch", "-nx", "-p", pids[i], "-ex", "thread apply all bt"}, {},
                    std::chrono::seconds(30));
    out += "\n--- stacks of pid " + pids[i] + " (timed out)\n" + r.output;
  }
  return out;
}

}  // namespace sluice::proc
