#include "host_facts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>

#include "transport/ofi/fabric_lib.h"
#include "transport/ofi/ofi.h"

namespace sluice::tool {
namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string address_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

bool sockaddr_is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr) != 0;
  }
  return false;
}

// getaddrinfo for host:port, TCP or UDP; nullptr and `error` on failure.
addrinfo* resolve(const std::string& host, uint16_t port, int socktype, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    if (error) *error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return nullptr;
  }
  return found;
}

// Reads exactly `n` bytes from `fd` (retrying EINTR); false at EOF or error.
bool read_exact(int fd, void* out, size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// How a child that was waited for ended, for messages.
std::string child_end(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("the probe process was killed by signal ") +
           std::to_string(WTERMSIG(status)) +
           (WTERMSIG(status) == SIGKILL ? " (SIGKILL: the memory cgroup's OOM killer?)" : "");
  }
  return "the probe process exited with status " + std::to_string(WEXITSTATUS(status));
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Whether libfabric has any RDM endpoint of this provider, whatever its
// capabilities (so that "absent" and "lacks what sluice asks" read apart).
bool provider_present(const std::string& choice) {
  namespace lib = sluice::detail::ofi::lib;
  fi_info* hints = lib::allocinfo();
  if (hints == nullptr) return false;  // libfabric cannot be loaded
  hints->ep_attr->type = FI_EP_RDM;
  hints->fabric_attr->prov_name = ::strdup(choice == "tcp"     ? "tcp;ofi_rxm"
                                           : choice == "verbs" ? "verbs;ofi_rxm"
                                                               : choice.c_str());
  fi_info* found = nullptr;
  const int rc = lib::getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &found);
  lib::freeinfo(hints);
  lib::freeinfo(found);
  return rc == 0;
}

}  // namespace

std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    a.address = address_text(i->ifa_addr);
    a.up = (i->ifa_flags & IFF_UP) != 0;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

std::string local_address_towards(const std::string& host, uint16_t port, std::string* error) {
  addrinfo* found = resolve(host, port, SOCK_DGRAM, error);
  if (found == nullptr) return {};
  std::string local;
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // connect() on a UDP socket only picks the route: nothing is sent.
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        local = address_text(reinterpret_cast<sockaddr*>(&ss));
      }
    } else if (error) {
      *error = "no route to " + host + ": " + errno_text(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return local;
}

bool is_loopback_host(const std::string& host) {
  addrinfo* found = resolve(host, 0, SOCK_STREAM, nullptr);
  if (found == nullptr) return false;
  bool all = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next)
    all = all && sockaddr_is_loopback(a->ai_addr);
  ::freeaddrinfo(found);
  return all;
}

bool tcp_connects(const std::string& host, uint16_t port, int timeout_ms, std::string* error) {
  addrinfo* found = resolve(host, port, SOCK_STREAM, error);
  if (found == nullptr) return false;
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, timeout_ms);
      if (ready == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        if (ready == 0) errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ok = true;
    } else if (error && error->empty()) {
      *error = "cannot connect to " + host + ":" + std::to_string(port) + ": " + errno_text(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return ok;
}

// What libfabric's shm provider needs free in /dev/shm to open an endpoint
// (measured: it opens with a 32 MiB tmpfs there, not with 24 MiB).
constexpr uint64_t kShmProviderNeeds = uint64_t{32} << 20;

std::vector<ProviderProbe> probe_providers(const std::string& node) {
  std::vector<ProviderProbe> out;
  for (const char* choice : {"verbs", "efa", "tcp", "shm"}) {
    ProviderProbe p;
    p.choice = choice;
    detail::ofi::Config cfg;
    cfg.provider = choice;
    // libfabric's shm provider is local only: bind it to no address.
    cfg.node = p.choice == "shm" ? std::string() : node;
    cfg.region = true;
    if (!provider_present(p.choice)) {
      p.error = "not present on this host (fi_getinfo finds no RDM endpoint of it)";
      // libfabric's shm provider is always built in; what it lacks is room
      // for its queues in /dev/shm (about 32 MiB here).
      if (p.choice == "shm") {
        struct statvfs st {};
        if (::statvfs("/dev/shm", &st) != 0) {
          p.error = "libfabric's shm provider does not open: /dev/shm is missing (" +
                    std::string(std::strerror(errno)) + ")";
          p.fix =
              "mount a tmpfs on /dev/shm (docker does; in a chroot or a minimal container: "
              "mount -t tmpfs -o size=1g tmpfs /dev/shm)";
        } else if (const uint64_t free_bytes = uint64_t{st.f_bavail} * st.f_frsize;
                   free_bytes < kShmProviderNeeds) {
          p.error = "libfabric's shm provider does not open: /dev/shm has " +
                    std::to_string(free_bytes >> 20) + " MiB free of " +
                    std::to_string((uint64_t{st.f_blocks} * st.f_frsize) >> 20) +
                    " MiB, and it keeps its queues there (it needs about " +
                    std::to_string(kShmProviderNeeds >> 20) + " MiB)";
          p.fix =
              "give /dev/shm more room (docker: --shm-size 1g; Kubernetes: an emptyDir of "
              "medium Memory at /dev/shm; or remount it: mount -o remount,size=1g /dev/shm)";
        }
      }
      out.push_back(std::move(p));
      continue;
    }
    try {
      detail::ofi::Endpoint ep(cfg);
      const fi_info* info = ep.info();
      p.usable = true;
      p.libfabric_name = ep.provider_name();
      p.fabric = info->fabric_attr->name ? info->fabric_attr->name : "";
      p.domain = info->domain_attr->name ? info->domain_attr->name : "";
      p.rma = ep.rma();
      p.atomics = ep.atomic();
      p.names_sources = ep.knows_sources();
      p.needs_data_receives = ep.needs_data_receives();
      p.cq_data_size = ep.cq_data_size();
      p.wait_fd = ep.wait_fd() >= 0;
      uint64_t order = info->tx_attr->msg_order;
      p.msg_order =
          order == 0 ? "none" : sluice::detail::ofi::lib::tostr(&order, FI_TYPE_MSG_ORDER);
      int mr_mode = info->domain_attr->mr_mode;
      p.mr_mode =
          mr_mode == 0 ? "none" : sluice::detail::ofi::lib::tostr(&mr_mode, FI_TYPE_MR_MODE);
      p.pins_memory = p.choice == "verbs" || p.choice == "efa";
    } catch (const std::exception& e) {
      p.error = e.what();
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string auto_provider(const std::vector<ProviderProbe>& probes) {
  for (const char* choice : {"verbs", "efa", "tcp"}) {
    for (const ProviderProbe& p : probes) {
      if (p.choice == choice && p.usable) return p.choice;
    }
  }
  return {};
}

std::optional<uint64_t> soft_limit(int resource) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(r.rlim_cur);
}

bool memfd_holds(uint64_t bytes, std::string* error) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    *error = "pipe: " + errno_text(errno);
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = "fork: " + errno_text(errno);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return false;
  }
  if (pid == 0) {
    // The child: report errno (0 for success) as one int, then exit. If the
    // allocation meets a memory cgroup's OOM killer, it is the one to die.
    {
      std::ofstream adj("/proc/self/oom_score_adj");
      adj << 1000;
    }
    int result = 0;
    const int fd = ::memfd_create("sluice-doctor", MFD_CLOEXEC);
    if (fd < 0) {
      result = -errno;
    } else if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
      result = errno;
    }
    (void)!::write(pipefd[1], &result, sizeof(result));
    ::_exit(0);
  }
  ::close(pipefd[1]);
  int result = 0;
  const bool got = read_exact(pipefd[0], &result, sizeof(result));
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!got) {
    *error = "allocating " + human_bytes(bytes) + " of memfd: " + child_end(status);
    return false;
  }
  if (result < 0) {
    *error = "memfd_create: " + errno_text(-result);
    return false;
  }
  if (result > 0) {
    *error = "allocating " + human_bytes(bytes) + " of memfd: " + errno_text(result);
    return false;
  }
  return true;
}

bool peer_memfd_opens(std::string* error) {
  int to_parent[2];
  int to_child[2];
  if (::pipe2(to_parent, O_CLOEXEC) != 0 || ::pipe2(to_child, O_CLOEXEC) != 0) {
    *error = "pipe: " + errno_text(errno);
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = "fork: " + errno_text(errno);
    return false;
  }
  if (pid == 0) {
    // The peer: hold a memfd open until the parent has tried it.
    ::close(to_parent[0]);
    ::close(to_child[1]);
    int fd = ::memfd_create("sluice-doctor-peer", MFD_CLOEXEC);
    if (fd >= 0 && ::ftruncate(fd, 4096) != 0) fd = -1;
    (void)!::write(to_parent[1], &fd, sizeof(fd));
    char done;
    (void)!::read(to_child[0], &done, 1);
    ::_exit(0);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  int fd = -1;
  bool ok = false;
  if (!read_exact(to_parent[0], &fd, sizeof(fd)) || fd < 0) {
    *error = "the peer process could not create a memfd";
  } else {
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (mine < 0) {
      *error = "open(" + path + "): " + errno_text(errno);
    } else {
      void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
      if (p == MAP_FAILED) {
        *error = "mmap of " + path + ": " + errno_text(errno);
      } else {
        ::munmap(p, 4096);
        ok = true;
      }
      ::close(mine);
    }
  }
  ::close(to_child[1]);  // the peer's read returns: it exits
  ::close(to_parent[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return ok;
}

namespace {

// A value of this process's memory cgroup: `v2_file` (memory.max,
// memory.current) under cgroup v2, else `v1_file` (memory.limit_in_bytes,
// memory.usage_in_bytes) under v1; nullopt when unlimited or unknown.
std::optional<uint64_t> cgroup_memory_value(const char* v2_file, const char* v1_file) {
  // This process's cgroup: "0::/path" (v2) or "N:memory:/path" (v1).
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::string v2_path;
  std::string v1_path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    const size_t m = line.find(":memory:");
    if (m != std::string::npos) v1_path = line.substr(m + 8);
  }
  auto parse = [](const std::string& text) -> std::optional<uint64_t> {
    if (text.empty() || text == "max") return std::nullopt;
    try {
      const uint64_t v = std::stoull(text);
      // v1 writes "unlimited" as a page-rounded LONG_MAX.
      if (v >= (uint64_t{1} << 62)) return std::nullopt;
      return v;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  // A v1 memory hierarchy wins where it is mounted: v2 then has no memory
  // controller (hybrid hosts mount v2 at /sys/fs/cgroup/unified).
  if (!v1_path.empty()) {
    const std::string text = read_first_line("/sys/fs/cgroup/memory" + v1_path + "/" + v1_file);
    if (!text.empty()) return parse(text);
  }
  if (!v2_path.empty()) {
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      const std::string text = read_first_line(root + v2_path + "/" + v2_file);
      if (!text.empty()) return parse(text);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> cgroup_memory_limit() {
  return cgroup_memory_value("memory.max", "memory.limit_in_bytes");
}

std::optional<uint64_t> cgroup_memory_usage() {
  return cgroup_memory_value("memory.current", "memory.usage_in_bytes");
}

bool filesystem_space(const std::string& path, uint64_t* size, uint64_t* available) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return false;
  *size = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  *available = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return true;
}

uint64_t memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string libfabric_version() {
  const uint32_t v = sluice::detail::ofi::lib::version();
  if (v == 0) return "not loadable";
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  }
  return buf;
}

}  // namespace sluice::tool
