#include "support/test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace sluice::testing {

std::string bin(const std::string& name) { return std::string(SLUICE_BIN_DIR) + "/" + name; }

ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds limit) {
  ProcessResult result;
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    result.output = std::string("pipe failed: ") + std::strerror(errno);
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  ::setpgid(pid, pid);
  const auto deadline = start + limit;
  char buf[65536];
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      result.output += stacks_of_group(pid);
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed: the process (and its children) are done
    result.output.append(buf, static_cast<size_t>(n));
  }
  // Drain what is left after a kill.
  ::fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof(buf))) > 0;) result.output.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  return result;
}

std::string stacks_of_group(int pgid) {
  static const char* const kGdb = "/usr/bin/gdb";
  if (::access(kGdb, X_OK) != 0) return "\n(no stacks of the timed-out processes: gdb is not installed)\n";
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
    ProcessResult r = run_process({kGdb, "-batch", "-nx", "-p", pids[i], "-ex", "thread apply all bt"}, {},
                                  std::chrono::seconds(30));
    out += "\n--- stacks of pid " + pids[i] + " (timed out)\n" + r.output;
  }
  return out;
}

std::vector<std::string> sluice_shm_entries() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.find("sluice") != std::string::npos) out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace sluice::testing
