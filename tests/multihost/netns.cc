#include "multihost/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <sstream>
#include <stdexcept>

namespace sluice::testing {
namespace {

constexpr char kNetnsPrefix[] = "sluice-mh-";
// Interface names are limited to 15 bytes, so links get a shorter prefix.
constexpr char kLinkPrefix[] = "smh";
constexpr auto kIpLimit = std::chrono::seconds(20);
constexpr auto kConnectLimit = std::chrono::seconds(5);

std::atomic<int> next_instance{0};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

// Runs `ip args...`; returns what went wrong, or "" on success.
std::string try_ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_program()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = run_process(argv, {}, kIpLimit);
  if (r.exit_code == 0) return "";
  std::string why = "`ip " + join(args) + "` ";
  if (r.timed_out) return why + "did not finish within 20 s";
  if (r.term_signal != 0) return why + "was killed by signal " + std::to_string(r.term_signal);
  while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
  return why + "failed (exit " + std::to_string(r.exit_code) + "): " + r.output;
}

void ip(const std::vector<std::string>& args) {
  if (std::string why = try_ip(args); !why.empty()) throw std::runtime_error(why);
}

std::string ip_output(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_program()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = run_process(argv, {}, kIpLimit);
  return r.exit_code == 0 ? r.output : "";
}

// The pid in "<prefix><pid>-...", or -1.
long pid_in(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j >= name.size() || name[j] != '-') return -1;
  return std::stol(name.substr(i, j - i));
}

bool process_gone(long pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Processes still inside a namespace would keep it alive after `ip netns
// delete` (only its name goes away); a test killed by its timeout leaves its
// ranks and registry running there. Kill them first.
void kill_processes_in(const std::string& netns) {
  std::stringstream in(ip_output({"netns", "pids", netns}));
  for (long pid; in >> pid;) {
    if (pid > 1 && pid != ::getpid()) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

// Deletes root links first: deleting one end of a veth deletes both, and the
// bridge goes last once it has no ports.
int remove_matching(const std::vector<std::string>& netns, const std::vector<std::string>& links) {
  int removed = 0;
  std::vector<std::string> bridges;
  for (const auto& l : links) {
    if (!l.empty() && l.back() == 'b') {
      bridges.push_back(l);
      continue;
    }
    removed += try_ip({"link", "delete", l}).empty();
  }
  for (const auto& b : bridges) removed += try_ip({"link", "delete", b}).empty();
  for (const auto& n : netns) {
    kill_processes_in(n);
    removed += try_ip({"netns", "delete", n}).empty();
  }
  return removed;
}

// A socket created by a thread that first entered `netns`; sockets stay in
// the namespace they were created in, so the rest of the test process can
// use it. -1 with `why` set on failure.
int socket_in(const std::string& netns, std::string* why) {
  return std::async(std::launch::async,
                    [&]() -> int {
                      const std::string path = "/run/netns/" + netns;
                      int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
                      if (ns < 0) {
                        *why = "open " + path + ": " + std::strerror(errno);
                        return -1;
                      }
                      // This thread only: it ends right after, the caller's namespace is untouched.
                      if (::setns(ns, CLONE_NEWNET) != 0) {
                        *why = "setns " + netns + ": " + std::strerror(errno);
                        ::close(ns);
                        return -1;
                      }
                      ::close(ns);
                      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                      if (fd < 0) *why = std::string("socket: ") + std::strerror(errno);
                      return fd;
                    })
      .get();
}

sockaddr_in address_of(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

}  // namespace

// Found once, by absolute path: we exec without a shell, and sbin is often
// missing from a test runner's PATH.
const std::string& ip_program() {
  static const std::string path = [] {
    std::vector<std::string> dirs;
    if (const char* p = std::getenv("PATH")) {
      std::stringstream in(p);
      for (std::string d; std::getline(in, d, ':');) dirs.push_back(d);
    }
    for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
    for (const auto& d : dirs) {
      const std::string candidate = d + "/ip";
      if (!d.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return std::string();
  }();
  return path;
}

const char* to_string(Topology t) {
  switch (t) {
    case Topology::kAuto:
      return "auto";
    case Topology::kBridge:
      return "bridge";
    case Topology::kMesh:
      return "mesh";
  }
  return "?";
}

std::vector<std::string> list_netns() {
  std::vector<std::string> out;
  std::stringstream in(ip_output({"netns", "list"}));
  // Lines look like "NAME (id: 3)" or just "NAME".
  for (std::string line; std::getline(in, line);) {
    std::string name = line.substr(0, line.find(' '));
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

std::vector<std::string> list_root_links() {
  std::vector<std::string> out;
  std::stringstream in(ip_output({"-o", "link", "show"}));
  // Lines look like "9: NAME@if2: <BROADCAST,...> ...".
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 2);
    name = name.substr(0, name.find_first_of("@:"));
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

bool TestHosts::can_create(std::string* why) {
  if (::geteuid() != 0) {
    *why = "not running as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)";
    return false;
  }
  if (ip_program().empty()) {
    *why = "no `ip` program (iproute2) in PATH, /usr/sbin or /sbin";
    return false;
  }
  // Only trying tells: a container may be root without the capabilities.
  const std::string probe = std::string(kNetnsPrefix) + std::to_string(::getpid()) + "-probe";
  std::string failed = try_ip({"netns", "add", probe});
  if (failed.empty()) {
    failed = try_ip({"-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"});
    try_ip({"netns", "delete", probe});
  }
  if (!failed.empty()) {
    *why = failed;
    return false;
  }
  return true;
}

int TestHosts::remove_stale() {
  std::vector<std::string> netns, links;
  for (const auto& n : list_netns()) {
    if (process_gone(pid_in(n, kNetnsPrefix))) netns.push_back(n);
  }
  for (const auto& l : list_root_links()) {
    if (process_gone(pid_in(l, kLinkPrefix))) links.push_back(l);
  }
  return remove_matching(netns, links);
}

TestHosts::TestHosts(int count, Topology topology) {
  if (count < 1 || count > 9) throw std::invalid_argument("TestHosts: 1..9 hosts");
  if (ip_program().empty()) throw std::runtime_error("TestHosts: no `ip` program (iproute2)");
  remove_stale();
  const int n = next_instance++;
  tag_ = std::to_string(::getpid()) + "-" + std::to_string(n % 100);
  link_prefix_ = kLinkPrefix + tag_;
  subnet_ = 1 + n % 250;
  for (int i = 0; i < count; ++i) names_.push_back(kNetnsPrefix + tag_ + "-" + std::to_string(i));

  auto build = [&](Topology t) {
    topology_ = t;
    if (t == Topology::kMesh) {
      build_mesh();
    } else {
      build_bridge();
    }
    check_connectivity();
  };
  try {
    if (topology != Topology::kAuto) {
      build(topology);
      return;
    }
    try {
      build(Topology::kBridge);
    } catch (const std::exception& e) {
      // Bridged traffic can be dropped by br_netfilter and a DROP forward
      // policy (common on Docker hosts); a mesh never passes the bridge.
      std::fprintf(stderr, "multihost: bridge topology unusable (%s); using a veth mesh\n",
                   e.what());
      remove_all();
      build(Topology::kMesh);
    }
  } catch (...) {
    remove_all();
    throw;
  }
}

TestHosts::~TestHosts() { remove_all(); }

void TestHosts::remove_all() {
  std::vector<std::string> netns, links;
  for (const auto& n : list_netns()) {
    if (n.rfind(kNetnsPrefix + tag_ + "-", 0) == 0) netns.push_back(n);
  }
  for (const auto& l : list_root_links()) {
    if (l.rfind(link_prefix_, 0) == 0 && l.size() > link_prefix_.size() &&
        (l[link_prefix_.size()] == 'v' || l[link_prefix_.size()] == 'b')) {
      links.push_back(l);
    }
  }
  remove_matching(netns, links);
  root_links_.clear();
}

std::string TestHosts::ip(int i) const {
  return "198.18." + std::to_string(subnet_) + "." + std::to_string(i + 1);
}

void TestHosts::build_bridge() {
  const std::string bridge = link_prefix_ + "b";
  // No STP and no forwarding delay: ports forward as soon as they are up.
  sluice::testing::ip(
      {"link", "add", bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0"});
  root_links_.push_back(bridge);
  sluice::testing::ip({"link", "set", bridge, "up"});
  for (int i = 0; i < size(); ++i) {
    const std::string& ns = names_[i];
    const std::string root_end = link_prefix_ + "v" + std::to_string(i);
    sluice::testing::ip({"netns", "add", ns});
    sluice::testing::ip({"-n", ns, "link", "set", "lo", "up"});
    // The peer is created directly inside the namespace, so it never
    // appears (and never needs cleaning) in the root namespace.
    sluice::testing::ip(
        {"link", "add", root_end, "type", "veth", "peer", "name", "eth0", "netns", ns});
    root_links_.push_back(root_end);
    sluice::testing::ip({"link", "set", root_end, "master", bridge, "up"});
    sluice::testing::ip({"-n", ns, "addr", "add", ip(i) + "/24", "dev", "eth0"});
    sluice::testing::ip({"-n", ns, "link", "set", "eth0", "up"});
  }
}

void TestHosts::build_mesh() {
  for (int i = 0; i < size(); ++i) {
    sluice::testing::ip({"netns", "add", names_[i]});
    sluice::testing::ip({"-n", names_[i], "link", "set", "lo", "up"});
    // One address per host, on lo, whichever link a peer reaches it by.
    sluice::testing::ip({"-n", names_[i], "addr", "add", ip(i) + "/32", "dev", "lo"});
  }
  for (int i = 0; i < size(); ++i) {
    for (int j = i + 1; j < size(); ++j) {
      const std::string to_j = "to" + std::to_string(j), to_i = "to" + std::to_string(i);
      sluice::testing::ip({"link", "add", to_j, "netns", names_[i], "type", "veth", "peer", "name",
                           to_i, "netns", names_[j]});
      sluice::testing::ip({"-n", names_[i], "link", "set", to_j, "up"});
      sluice::testing::ip({"-n", names_[j], "link", "set", to_i, "up"});
      sluice::testing::ip(
          {"-n", names_[i], "route", "add", ip(j) + "/32", "dev", to_j, "src", ip(i)});
      sluice::testing::ip(
          {"-n", names_[j], "route", "add", ip(i) + "/32", "dev", to_i, "src", ip(j)});
    }
  }
}

void TestHosts::check_connectivity() const {
  // A listener in each host; every other host must complete a TCP handshake
  // with it (the backlog accepts without an accept() call).
  std::vector<int> listeners(size(), -1);
  std::vector<uint16_t> ports(size(), 0);
  std::string problem;
  for (int j = 0; j < size() && problem.empty(); ++j) {
    std::string why;
    int fd = socket_in(names_[j], &why);
    listeners[j] = fd;
    sockaddr_in a = address_of(ip(j), 0);
    socklen_t len = sizeof(a);
    if (fd < 0) {
      problem = "host " + std::to_string(j) + ": " + why;
    } else if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
               ::listen(fd, 16) != 0 ||
               ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      problem = "cannot listen on " + ip(j) + " in " + names_[j] + ": " + std::strerror(errno);
    } else {
      ports[j] = ntohs(a.sin_port);
    }
  }
  const auto deadline = Clock::now() + kConnectLimit;
  for (int i = 0; i < size() && problem.empty(); ++i) {
    for (int j = 0; j < size() && problem.empty(); ++j) {
      if (i == j) continue;
      std::string why;
      int fd = socket_in(names_[i], &why);
      if (fd < 0) {
        problem = "host " + std::to_string(i) + ": " + why;
        break;
      }
      sockaddr_in a = address_of(ip(j), ports[j]);
      int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      int err = r == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
        while ((r = ::poll(&p, 1, ms > 0 ? ms : 0)) < 0 && errno == EINTR) {
        }
        socklen_t len = sizeof(err);
        if (r == 1) {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      ::close(fd);
      if (err != 0) {
        problem = "host " + std::to_string(i) + " (" + ip(i) + ") cannot connect to host " +
                  std::to_string(j) + " (" + ip(j) + ":" + std::to_string(ports[j]) +
                  "): " + std::strerror(err);
      }
    }
  }
  for (int fd : listeners) {
    if (fd >= 0) ::close(fd);
  }
  if (!problem.empty()) {
    throw std::runtime_error(std::string(to_string(topology_)) + " topology: " + problem);
  }
}

void TestHosts::isolate(int i) const {
  if (topology_ == Topology::kBridge) {
    sluice::testing::ip({"-n", names_.at(i), "link", "set", "eth0", "down"});
    return;
  }
  for (int j = 0; j < size(); ++j) {
    if (j != i)
      sluice::testing::ip({"-n", names_.at(i), "link", "set", "to" + std::to_string(j), "down"});
  }
}

std::vector<std::string> TestHosts::in_host(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_program(), "netns", "exec", name(i)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::unique_ptr<ChildProcess> TestHosts::spawn(int i, const std::vector<std::string>& argv,
                                               const std::vector<std::string>& env) const {
  return std::make_unique<ChildProcess>(in_host(i, argv), env);
}

ProcessResult TestHosts::run(int i, const std::vector<std::string>& argv,
                             std::chrono::milliseconds limit) const {
  return run_process(in_host(i, argv), {}, limit);
}

}  // namespace sluice::testing
