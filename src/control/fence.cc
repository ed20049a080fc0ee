#include "control/fence.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>

#include "transport/shm/region.h"

namespace sluice::control {
namespace {

// Field 22 of /proc/<pid>/stat (the start time, in clock ticks after boot),
// or empty if the process does not exist. The command name (field 2) may
// hold spaces and parentheses: the fields after it follow the last ')'.
// (Read with read(2): a process that exits while its file is read makes
// the read fail with ESRCH, which an ifstream would throw.)
std::string start_time(uint32_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string stat;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) stat.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (n < 0) return {};
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return {};
  }
  return field;
}

std::string pid_namespace() {
  char ns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("pid");
}

// Everything of this process's identity but its start time (read once).
const std::string& this_host() {
  static const std::string host = detail::host_identity() + "|" + pid_namespace() + "|";
  return host;
}

}  // namespace

std::string fence_identity() { return this_host() + start_time(static_cast<uint32_t>(::getpid())); }

FenceOutcome fence(const std::string& identity, uint32_t pid, std::chrono::milliseconds wait) {
  const std::string& here = this_host();
  if (pid == 0 || pid == static_cast<uint32_t>(::getpid()) || identity.size() <= here.size() ||
      identity.compare(0, here.size(), here) != 0) {
    return {FenceOutcome::kElsewhere, {}};
  }
  const std::string started = identity.substr(here.size());
  // The pidfd names one process for good; its start time, read after the
  // pidfd was opened, proves that it is the one the identity names (a pid
  // reused by a later process fails the comparison, and the one named had
  // exited).
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    if (errno == ESRCH) return {FenceOutcome::kGone, {}};
    return {FenceOutcome::kFailed, std::string("pidfd_open: ") + std::strerror(errno)};
  }
  FenceOutcome out;
  pollfd exited{pidfd, POLLIN, 0};  // readable once the process exited (a zombie too)
  if (start_time(pid) != started || ::poll(&exited, 1, 0) > 0) {
    out.kind = FenceOutcome::kGone;
  } else if (::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) != 0 && errno != ESRCH) {
    out = {FenceOutcome::kFailed, std::string("cannot kill it: ") + std::strerror(errno)};
  } else {
    // The pidfd turns readable once the process exited (reaped or not).
    pollfd p{pidfd, POLLIN, 0};
    int rc;
    while ((rc = ::poll(&p, 1, static_cast<int>(wait.count()))) < 0 && errno == EINTR) {
    }
    if (rc > 0) {
      out.kind = FenceOutcome::kKilled;
    } else {
      out = {FenceOutcome::kNoExit, "killed with SIGKILL but not exited after " +
                                        std::to_string(wait.count()) +
                                        " ms (it runs no more of its own code)"};
    }
  }
  ::close(pidfd);
  return out;
}

}  // namespace sluice::control
