#include "control/fence.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
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
struct ProcStat {
  std::string start_time;  // empty if the process could not be read
  uint64_t flags = 0;      // the kernel's task flags (PF_*)
};
ProcStat proc_stat(uint32_t pid) {
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
  ProcStat out;
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return {};
    if (i == 9) out.flags = std::strtoull(field.c_str(), nullptr, 10);
  }
  out.start_time = field;
  return out;
}

std::string start_time(uint32_t pid) { return proc_stat(pid).start_time; }

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
  const ProcStat stat = proc_stat(pid);
  // PF_EXITING (of its main thread): the process is already on its way out
  // (killed from outside, or it returned), which is also how its connection
  // to the registry closed. It is killed all the same (harmless if it is
  // exiting; a process whose main thread alone exited still runs its other
  // threads), but the outcome says it was exiting, for the log.
  constexpr uint64_t kExiting = 0x4;
  const bool exiting = (stat.flags & kExiting) != 0;
  if (stat.start_time != started || ::poll(&exited, 1, 0) > 0) {
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
      out.kind = exiting ? FenceOutcome::kExiting : FenceOutcome::kKilled;
    } else {
      out = {FenceOutcome::kNoExit, "not seen to exit within " + std::to_string(wait.count()) +
                                        " ms (it runs no more of its own code)"};
    }
  }
  ::close(pidfd);
  return out;
}

}  // namespace sluice::control
