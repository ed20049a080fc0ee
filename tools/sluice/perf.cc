// `sluice perf`: shuffle throughput of flows of several shapes and record
// sizes, each next to the bound measured in the same run: for the shm
// transport a plain two-process SPSC ring (perf_ring.h); for the ofi
// transport (--transport ofi) a kernel TCP stream between the same two
// endpoints (perf_tcp.h), plus the 64 B round trip of a Latency-mode flow
// next to a TCP ping-pong. With --netns the two ends of every ofi
// measurement run in two network namespaces (bench/ofi_netns.sh). See
// docs/benchmarks.md.
//
// Structure: this process stays single-threaded between jobs. For every
// repeat it first runs the baseline (ring, or TCP peer) for every size, then
// one flow job per shape, whose ranks are this same binary's hidden
// `perf-worker` subcommand (perf_worker.h), started by run_job (one host) or
// by hand inside the namespaces (--netns). Baseline and flow runs of one
// repeat are therefore back to back, which is what the paired ratio uses.
#include <signal.h>
#include <sys/utsname.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "perf_ring.h"
#include "perf_stats.h"
#include "perf_tcp.h"
#include "perf_worker.h"
#include "run.h"
#include "sluice/sluice.h"
#include "tool_util.h"

namespace sluice::tool {
namespace {

using perf::Result;
using perf::Run;
using perf::Shape;

struct PerfOptions {
  std::string sizes = "16,64,256,1024";
  std::string shapes = "1x1,2x2";
  uint32_t repeats = 5;
  double mbytes = 1024;
  std::string json_file;
  bool smoke = false;
  std::string transport = "shm";
  uint32_t segment_bytes = 0;  // 0: the flow default
  uint32_t ring_segments = 0;  // 0: the flow default
  uint32_t latency = 2000;     // ofi: round trips per latency run; 0: none
  std::string netns;           // ofi: "NS_A=IP_A,NS_B=IP_B"
};

// What --smoke moves per source per run: enough to exercise every path,
// little enough that the CTest finishes in seconds.
constexpr double kSmokeMbytes = 2;

void progress(const std::string& line) { write_all(STDERR_FILENO, "sluice perf: " + line + "\n"); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// `git rev-parse HEAD` in the cwd, or "unknown" (not a work tree, no git).
std::string git_commit() {
  FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r");
  if (p == nullptr) return "unknown";
  char buf[128] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  const int status = pclose(p);
  std::string s = got ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (status != 0 || s.size() < 7) return "unknown";
  return s;
}

perf::Environment environment() {
  perf::Environment env;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  env.hostname = host;
  env.nproc = static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN));
  utsname u;
  if (uname(&u) == 0) env.kernel = std::string(u.sysname) + " " + u.release + " " + u.version;
  env.cpu_model = cpu_model();
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  env.date = date;
  env.git_commit = git_commit();
  return env;
}

// The command line exactly as this process was started.
std::string own_command() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(f, arg, '\0');) argv.push_back(arg);
  return perf::quote_command(argv);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    throw std::runtime_error(std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// SLUICE_* settings the ranks inherit (e.g. SLUICE_SPIN), so a report says
// which knobs were turned.
nlohmann::json sluice_env() {
  nlohmann::json j = nlohmann::json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("SLUICE_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (kv.rfind("SLUICE_SECRET", 0) == 0) continue;  // never print a secret
    j[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return j;
}

// The flow's effective segment payload and ring length for these options,
// after checking them against every record size (as Cluster::declare would).
void effective_geometry(const PerfOptions& opt, const std::vector<uint32_t>& sizes, uint32_t* segment_bytes,
                        uint32_t* ring_segments) {
  for (uint32_t size : sizes) {
    FlowSpec spec;
    spec.name = "perf";
    spec.record_size = size;
    spec.record_align = 8;
    spec.sources = {{0, 0}};
    spec.targets = {{1, 0}};
    spec.segment_bytes = opt.segment_bytes;
    spec.ring_segments = opt.ring_segments;
    try {
      spec.validate();
    } catch (const std::exception& e) {
      throw std::invalid_argument("--segment-bytes " + std::to_string(opt.segment_bytes) + " / --ring-segments " +
                                  std::to_string(opt.ring_segments) + " with " + std::to_string(size) +
                                  " B records: " + e.what());
    }
    *segment_bytes = spec.effective_segment_bytes();
    *ring_segments = spec.effective_ring_segments();
  }
}

// Where the two ends of a measurement run: this host (loopback), or two
// network namespaces (first: registry, sources, TCP writer; second: targets,
// TCP reader).
struct Placement {
  std::optional<std::vector<perf::NetnsHost>> netns;

  std::string ip(bool second) const {
    return netns ? (*netns)[second ? 1 : 0].ip : std::string("127.0.0.1");
  }
  std::string name() const {
    if (!netns) return "loopback 127.0.0.1";
    return "netns " + (*netns)[0].netns + " " + (*netns)[0].ip + " -> " + (*netns)[1].netns + " " +
           (*netns)[1].ip + " (veth)";
  }
  // argv prefixed to run inside one end's namespace.
  std::vector<std::string> in(bool second, std::vector<std::string> argv) const {
    if (!netns) return argv;
    std::vector<std::string> out = {"ip", "netns", "exec", (*netns)[second ? 1 : 0].netns};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
};

using Env = std::vector<std::pair<std::string, std::string>>;

// A child started with fork + execvp; `out` is its stdout if captured.
struct Child {
  pid_t pid = -1;
  Fd out;
};

Child spawn(const std::vector<std::string>& argv, const Env& env, bool capture_stdout) {
  int p[2] = {-1, -1};
  if (capture_stdout && ::pipe2(p, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (capture_stdout) ::dup2(p[1], STDOUT_FILENO);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "sluice perf: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  Child c;
  c.pid = pid;
  if (capture_stdout) {
    ::close(p[1]);
    c.out.reset(p[0]);
  }
  return c;
}

// One line of `fd` (without the newline), or "" on EOF or after `seconds`.
std::string read_line(int fd, double seconds) {
  std::string line;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r <= 0) continue;
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

// Reads `fd` to EOF or `deadline`.
std::string read_all(int fd, Clock::time_point deadline) {
  std::string out;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Waits for a child until `deadline`, then kills it. Returns its exit status,
// 128+N for signal N, or 124 when it had to be killed.
int wait_child(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0 && errno != EINTR) return 1;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void stop_child(pid_t pid) {
  ::kill(pid, SIGTERM);
  if (wait_child(pid, Clock::now() + std::chrono::seconds(5)) == 124) progress("had to SIGKILL pid " + std::to_string(pid));
}

bool program_exists(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(start, colon - start);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

std::string temp_file() {
  char path[] = "/tmp/sluice-perf-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::close(fd);
  // Ranks in other network namespaces (same file system) append to it.
  ::chmod(path, 0644);
  return path;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// What every job of one sweep shares.
struct Sweep {
  std::string exe;
  std::string transport;  // "shm" or "ofi"
  Placement place;
  std::vector<Shape> shapes;
  std::vector<uint32_t> sizes;
  std::string sizes_arg;
  uint64_t bytes = 0;
  uint32_t segment_bytes = 0;    // as given (0: default)
  uint32_t ring_segments = 0;    // as given (0: default)
  uint32_t eff_segment_bytes = 0;
  uint32_t eff_ring_segments = 0;
  uint32_t latency = 0;
  bool smoke = false;
};

// Runs one job of `ranks` perf-worker ranks with `args`; ranks below
// `first_in_b` go to the first host. Returns the job's exit status.
int run_ranks(const Sweep& sw, const std::vector<std::string>& args, uint32_t ranks, uint32_t first_in_b) {
  const double timeout = sw.smoke ? 120 : 1800;
  std::vector<std::string> command = {sw.exe, "perf-worker"};
  command.insert(command.end(), args.begin(), args.end());
  if (!sw.place.netns) {
    RunOptions ro;
    ro.ranks = ranks;
    ro.command = command;
    ro.timeout_seconds = timeout;
    ro.grace_seconds = 5;
    // The ranks inherit this process's environment (run_job copies it).
    const char* old = std::getenv("SLUICE_TRANSPORT");
    const std::optional<std::string> saved = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    if (sw.transport == "ofi") ::setenv("SLUICE_TRANSPORT", "ofi", 1);
    // run_job leaves SIGINT/SIGTERM/SIGCHLD blocked for this thread; restore the
    // mask so that Ctrl-C still stops `sluice perf` between jobs.
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    const int status = run_job(ro);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    if (saved)
      ::setenv("SLUICE_TRANSPORT", saved->c_str(), 1);
    else
      ::unsetenv("SLUICE_TRANSPORT");
    return status;
  }
  // By hand in the namespaces: the registry in the first, ranks in both.
  const std::string secret = random_secret();
  Child reg = spawn(sw.place.in(false, {sw.exe, "registry", "--bind", sw.place.ip(false) + ":0", "--world",
                                        std::to_string(ranks), "--secret", secret}),
                    {}, true);
  std::string registry;
  for (int i = 0; i < 4 && registry.empty(); ++i) {
    const std::string line = read_line(reg.out.get(), 10);
    if (line.rfind("SLUICE_REGISTRY=", 0) == 0) registry = line.substr(16);
    if (line.empty()) break;
  }
  if (registry.empty()) {
    stop_child(reg.pid);
    progress("the registry in " + (*sw.place.netns)[0].netns + " did not report its address");
    return 1;
  }
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < ranks; ++r) {
    Env env = {{"SLUICE_RANK", std::to_string(r)},
               {"SLUICE_WORLD_SIZE", std::to_string(ranks)},
               {"SLUICE_REGISTRY", registry},
               {"SLUICE_SECRET", secret},
               {"SLUICE_TRANSPORT", "ofi"}};
    pids.push_back(spawn(sw.place.in(r >= first_in_b, command), env, false).pid);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(static_cast<int64_t>(timeout));
  int status = 0;
  for (pid_t pid : pids) {
    const int s = wait_child(pid, deadline);
    if (status == 0) status = s;
  }
  stop_child(reg.pid);
  return status;
}

std::vector<std::string> geometry_args(const Sweep& sw) {
  std::vector<std::string> a;
  if (sw.segment_bytes != 0) a.insert(a.end(), {"--segment-bytes", std::to_string(sw.segment_bytes)});
  if (sw.ring_segments != 0) a.insert(a.end(), {"--ring-segments", std::to_string(sw.ring_segments)});
  return a;
}

// Runs one flow job (all sizes of one repeat for one shape) and returns one
// Run per size, in the order of `sizes`.
std::vector<Run> run_flow_job(const Sweep& sw, const Shape& shape, uint32_t rep) {
  const std::string path = temp_file();
  std::vector<std::string> args = {"--sources", std::to_string(shape.sources), "--targets",
                                   std::to_string(shape.targets), "--sizes", sw.sizes_arg, "--rep",
                                   std::to_string(rep), "--bytes", std::to_string(sw.bytes), "--out", path};
  for (const std::string& a : geometry_args(sw)) args.push_back(a);
  const int status = run_ranks(sw, args, shape.sources + shape.targets, shape.sources);

  std::vector<Run> runs(sw.sizes.size());
  std::vector<bool> seen(sw.sizes.size(), false);
  for (const nlohmann::json& j : read_lines(path)) {
    if (!j.contains("record_bytes") || j.contains("kind")) continue;
    const auto it = std::find(sw.sizes.begin(), sw.sizes.end(), j["record_bytes"].get<uint32_t>());
    if (it == sw.sizes.end()) continue;
    const size_t i = static_cast<size_t>(it - sw.sizes.begin());
    runs[i] = Run{j["records"].get<double>(), j["seconds"].get<double>(), j["cpu_seconds"].get<double>()};
    seen[i] = true;
  }
  ::unlink(path.c_str());
  if (status != 0) {
    progress("the " + sw.transport + " " + shape.name() + " flow job failed (exit status " +
             std::to_string(status) + "); see the rank messages above");
    throw CLI::RuntimeError(status);
  }
  for (size_t i = 0; i < sw.sizes.size(); ++i) {
    if (!seen[i]) {
      progress("the " + shape.name() + " flow job exited 0 but reported no result for " +
               std::to_string(sw.sizes[i]) + " B records");
      throw CLI::RuntimeError(1);
    }
  }
  return runs;
}

// The flow round trip: two ranks, two Latency-mode flows.
nlohmann::json run_flow_latency(const Sweep& sw, uint32_t rep) {
  const std::string path = temp_file();
  const std::vector<std::string> args = {"--sources", "1", "--targets", "1", "--rep", std::to_string(rep),
                                         "--latency", std::to_string(sw.latency), "--out", path};
  const int status = run_ranks(sw, args, 2, 1);
  nlohmann::json found;
  for (const nlohmann::json& j : read_lines(path)) {
    if (j.value("kind", "") == "latency") found = j;
  }
  ::unlink(path.c_str());
  if (status != 0 || found.is_null()) {
    progress("the " + sw.transport + " latency job failed (exit status " + std::to_string(status) + ")");
    throw CLI::RuntimeError(status != 0 ? status : 1);
  }
  return found;
}

// The kernel TCP peer of one repeat: a stream per size, then the ping-pong.
struct TcpRep {
  std::vector<Run> runs;
  nlohmann::json latency;
};

TcpRep run_tcp_peer(const Sweep& sw, uint32_t rep) {
  const std::string path = temp_file();
  const std::vector<std::string> common = {"--sizes",   sw.sizes_arg, "--bytes", std::to_string(sw.bytes),
                                           "--chunk-bytes", std::to_string(sw.eff_segment_bytes),
                                           "--latency", std::to_string(sw.latency),
                                           "--rep",     std::to_string(rep)};
  std::vector<std::string> reader = {sw.exe, "perf-tcp", "--listen", sw.place.ip(true) + ":0", "--out", path};
  reader.insert(reader.end(), common.begin(), common.end());
  Child r = spawn(sw.place.in(true, reader), {}, true);
  const std::string line = read_line(r.out.get(), 20);
  if (line.rfind("PORT ", 0) != 0) {
    stop_child(r.pid);
    ::unlink(path.c_str());
    progress("the TCP peer's reader did not start (said '" + line + "')");
    throw CLI::RuntimeError(1);
  }
  std::vector<std::string> writer = {sw.exe, "perf-tcp", "--connect", sw.place.ip(true) + ":" + line.substr(5)};
  writer.insert(writer.end(), common.begin(), common.end());
  Child w = spawn(sw.place.in(false, writer), {}, false);
  const auto deadline = Clock::now() + std::chrono::seconds(sw.smoke ? 120 : 1800);
  const int ws = wait_child(w.pid, deadline);
  const int rs = wait_child(r.pid, deadline);
  TcpRep out;
  out.runs.resize(sw.sizes.size());
  std::vector<bool> seen(sw.sizes.size(), false);
  for (const nlohmann::json& j : read_lines(path)) {
    const std::string kind = j.value("kind", "");
    if (kind == "tcp_latency") out.latency = j;
    if (kind != "tcp_stream") continue;
    const auto it = std::find(sw.sizes.begin(), sw.sizes.end(), j["record_bytes"].get<uint32_t>());
    if (it == sw.sizes.end()) continue;
    const size_t i = static_cast<size_t>(it - sw.sizes.begin());
    out.runs[i] = Run{j["records"].get<double>(), j["seconds"].get<double>(), j["cpu_seconds"].get<double>()};
    seen[i] = true;
  }
  ::unlink(path.c_str());
  if (ws != 0 || rs != 0 || std::find(seen.begin(), seen.end(), false) != seen.end() ||
      (sw.latency > 0 && out.latency.is_null())) {
    progress("the TCP peer failed (writer exit " + std::to_string(ws) + ", reader exit " + std::to_string(rs) +
             "); see its messages above");
    throw CLI::RuntimeError(1);
  }
  return out;
}

// fi_rma_bw (fabtests) between the same two ends, where it is installed.
nlohmann::json run_fabtests(const Sweep& sw) {
  if (!program_exists("fi_rma_bw")) return "not installed (Debian 12 does not package fabtests)";
  const std::string size = std::to_string(sw.eff_segment_bytes);
  const std::string iters = sw.smoke ? "100" : "10000";
  const std::vector<std::string> base = {"fi_rma_bw", "-p", "tcp;ofi_rxm", "-e", "rdm", "-o", "write",
                                         "-S",        size, "-I", iters};
  std::vector<std::string> server = base;
  server.insert(server.end(), {"-s", sw.place.ip(true)});
  std::vector<std::string> client = base;
  client.insert(client.end(), {"-s", sw.place.ip(false), sw.place.ip(true)});
  Child s = spawn(sw.place.in(true, server), {}, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Child c = spawn(sw.place.in(false, client), {}, true);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  const std::string out = read_all(c.out.get(), deadline);
  const int cs = wait_child(c.pid, deadline);
  const int ss = wait_child(s.pid, Clock::now() + std::chrono::seconds(5));
  const double mbps = perf::parse_fabtests_mbps(out);
  nlohmann::json j = {{"command_server", perf::quote_command(server)},
                      {"command_client", perf::quote_command(client)},
                      {"exit_client", cs},
                      {"exit_server", ss}};
  if (mbps >= 0) {
    j["mbytes_per_s"] = mbps;
    j["gbytes_per_s"] = mbps / 1e3;
  } else {
    j["error"] = "no MB/sec row in its output";
    j["output"] = out.substr(0, 2000);
  }
  return j;
}

std::string mrec(const Run& run) { return fmt("%.1f", run.records / run.seconds / 1e6) + " M rec/s"; }

// One sweep: for every repeat the baseline of every size, then every shape's
// flow job (and, for ofi, the latency pair). Appends to results / extras /
// latency.
void run_sweep(const Sweep& sw, uint32_t repeats, std::vector<Result>* results,
               std::vector<perf::BaselineRow>* extras, nlohmann::json* latency) {
  const bool ofi = sw.transport == "ofi";
  const bool extra_64 = !ofi && std::find(sw.sizes.begin(), sw.sizes.end(), 64u) != sw.sizes.end();
  std::vector<std::vector<Run>> base(sw.sizes.size());
  std::vector<Run> ring_every_slot;
  std::vector<std::vector<std::vector<Run>>> flow(sw.shapes.size(), std::vector<std::vector<Run>>(sw.sizes.size()));
  std::vector<double> flow_med, flow_p99, tcp_med, tcp_p99;
  nlohmann::json lat_runs = nlohmann::json::array();

  for (uint32_t rep = 0; rep < repeats; ++rep) {
    const std::string r = sw.transport + " repeat " + std::to_string(rep + 1) + "/" + std::to_string(repeats) + ": ";
    if (ofi) {
      const TcpRep t = run_tcp_peer(sw, rep);
      for (size_t i = 0; i < sw.sizes.size(); ++i) {
        base[i].push_back(t.runs[i]);
        progress(r + "tcp stream " + std::to_string(sw.sizes[i]) + " B: " + mrec(t.runs[i]) + ", " +
                 fmt("%.2f", t.runs[i].records * sw.sizes[i] / t.runs[i].seconds / 1e9) + " GB/s");
      }
      if (sw.latency > 0) {
        tcp_med.push_back(t.latency["rtt_us_median"].get<double>());
        tcp_p99.push_back(t.latency["rtt_us_p99"].get<double>());
        lat_runs.push_back(t.latency);
        progress(r + "tcp ping-pong 64 B: median " + fmt("%.1f", tcp_med.back()) + " us, p99 " +
                 fmt("%.1f", tcp_p99.back()) + " us");
      }
    } else {
      try {
        for (size_t i = 0; i < sw.sizes.size(); ++i) {
          const Run run = perf::run_ring({sw.sizes[i], sw.bytes / sw.sizes[i], 16});
          base[i].push_back(run);
          progress(r + "ring 1:1 " + std::to_string(sw.sizes[i]) + " B: " + mrec(run));
        }
        if (extra_64) {
          const Run run = perf::run_ring({64, sw.bytes / 64, 1});
          ring_every_slot.push_back(run);
          progress(r + "ring 1:1 64 B publishing every slot: " + mrec(run));
        }
      } catch (const std::exception& e) {
        progress(std::string("baseline ring failed: ") + e.what());
        throw CLI::RuntimeError(1);
      }
    }
    for (size_t s = 0; s < sw.shapes.size(); ++s) {
      const std::vector<Run> runs = run_flow_job(sw, sw.shapes[s], rep);
      for (size_t i = 0; i < sw.sizes.size(); ++i) {
        flow[s][i].push_back(runs[i]);
        progress(r + "flow " + sw.shapes[s].name() + " " + std::to_string(sw.sizes[i]) + " B: " + mrec(runs[i]) +
                 ", " + fmt("%.2f", runs[i].records * sw.sizes[i] / runs[i].seconds / 1e9) + " GB/s");
      }
    }
    if (ofi && sw.latency > 0) {
      const nlohmann::json l = run_flow_latency(sw, rep);
      flow_med.push_back(l["rtt_us_median"].get<double>());
      flow_p99.push_back(l["rtt_us_p99"].get<double>());
      lat_runs.push_back(l);
      progress(r + "flow round trip 64 B: median " + fmt("%.1f", flow_med.back()) + " us, p99 " +
               fmt("%.1f", flow_p99.back()) + " us");
    }
  }

  for (size_t s = 0; s < sw.shapes.size(); ++s) {
    for (size_t i = 0; i < sw.sizes.size(); ++i) {
      Result res;
      res.shape = sw.shapes[s];
      res.record_bytes = sw.sizes[i];
      res.flow = flow[s][i];
      res.baseline = base[i];
      res.baseline_publish_every = 16;
      res.transport = sw.transport;
      res.segment_bytes = sw.eff_segment_bytes;
      res.ring_segments = sw.eff_ring_segments;
      res.peer = ofi ? "tcp_stream" : "shm_ring";
      res.placement = sw.place.name();
      results->push_back(std::move(res));
    }
  }
  if (extra_64) extras->push_back({64, 1, ring_every_slot});
  if (ofi && sw.latency > 0) {
    const perf::Summary fm = perf::summarize(flow_med);
    const perf::Summary tm = perf::summarize(tcp_med);
    latency->push_back({{"transport", sw.transport},
                        {"placement", sw.place.name()},
                        {"record_bytes", 64},
                        {"round_trips", sw.latency},
                        {"flow",
                         {{"what", "two Optimize::kLatency flows (rank 0 -> 1, 1 -> 0), one 64 B record bounced"},
                          {"rtt_us_median", perf::summary_json(fm)},
                          {"rtt_us_p99", perf::summary_json(perf::summarize(flow_p99))}}},
                        {"tcp",
                         {{"what", "64 B ping-pong, blocking sockets, TCP_NODELAY"},
                          {"rtt_us_median", perf::summary_json(tm)},
                          {"rtt_us_p99", perf::summary_json(perf::summarize(tcp_p99))}}},
                        {"ratio", tm.median > 0 ? fm.median / tm.median : 0.0},
                        {"runs", lat_runs}});
  }
}

std::string flow_description(const Sweep& sw) {
  const std::string geo = std::to_string(sw.eff_segment_bytes) + " B segments, " +
                          std::to_string(sw.eff_ring_segments) + " per ring";
  if (sw.transport == "ofi") {
    return "ofi shuffle (SLUICE_TRANSPORT=ofi, libfabric RDM endpoints), key-hash routing, "
           "Optimize::kBandwidth, " + geo + ", one endpoint per rank, " + sw.place.name();
  }
  return "shm shuffle, key-hash routing, Optimize::kBandwidth defaults (" + geo + "), one endpoint per rank";
}

void run_perf(const PerfOptions& opt) {
  std::vector<Sweep> sweeps;
  uint32_t repeats = opt.repeats;
  double mbytes = opt.mbytes;
  Placement place;
  const std::string exe = self_exe();
  try {
    if (opt.transport != "shm" && opt.transport != "ofi")
      throw std::invalid_argument("--transport '" + opt.transport + "': use shm or ofi");
    if (!opt.netns.empty()) {
      if (opt.transport != "ofi" && !opt.smoke) throw std::invalid_argument("--netns needs --transport ofi");
      place.netns = perf::parse_netns_hosts(opt.netns);
    }
    if (opt.smoke) {
      repeats = 1;
      mbytes = kSmokeMbytes;
      Sweep shm;
      shm.transport = "shm";
      shm.sizes_arg = "16,64";
      shm.shapes = perf::parse_shapes("1x1,2x2");
      sweeps.push_back(shm);
      // A tiny ofi run so that the ofi perf path cannot rot.
      Sweep ofi;
      ofi.transport = "ofi";
      ofi.place = place;
      ofi.sizes_arg = "64";
      ofi.shapes = perf::parse_shapes("1x1");
      ofi.latency = 200;
      sweeps.push_back(ofi);
    } else {
      Sweep sw;
      sw.transport = opt.transport;
      sw.place = place;
      sw.sizes_arg = opt.sizes;
      sw.shapes = perf::parse_shapes(opt.shapes);
      sw.latency = opt.transport == "ofi" ? opt.latency : 0;
      sweeps.push_back(sw);
    }
    for (Sweep& sw : sweeps) {
      sw.exe = exe;
      sw.smoke = opt.smoke;
      sw.sizes = perf::parse_sizes(sw.sizes_arg);
      sw.segment_bytes = opt.segment_bytes;
      sw.ring_segments = opt.ring_segments;
      effective_geometry(opt, sw.sizes, &sw.eff_segment_bytes, &sw.eff_ring_segments);
    }
  } catch (const std::invalid_argument& e) {
    progress(e.what());
    throw CLI::RuntimeError(2);
  }
  if (repeats < 1) {
    progress("--repeats " + std::to_string(repeats) + ": must be at least 1");
    throw CLI::RuntimeError(2);
  }
  if (!(mbytes > 0) || mbytes > 1 << 20) {
    progress("--mbytes " + fmt("%g", mbytes) + ": must be a number of MiB in (0, 1048576]");
    throw CLI::RuntimeError(2);
  }
  const uint64_t bytes = static_cast<uint64_t>(mbytes * (1 << 20));
  for (Sweep& sw : sweeps) {
    sw.bytes = bytes;
    for (uint32_t s : sw.sizes) {
      if (bytes / s == 0) {
        progress("--mbytes " + fmt("%g", mbytes) + " is less than one " + std::to_string(s) + " B record");
        throw CLI::RuntimeError(2);
      }
    }
  }

  // Everything that forks a shell happens before the measurements.
  const perf::Environment env = environment();
  const std::string command = own_command();

  std::vector<Result> results;
  std::vector<perf::BaselineRow> extras;
  nlohmann::json latency = nlohmann::json::array();
  nlohmann::json fabtests = nlohmann::json::object();
  for (const Sweep& sw : sweeps) {
    run_sweep(sw, repeats, &results, &extras, &latency);
    if (sw.transport == "ofi") fabtests["fi_rma_bw"] = run_fabtests(sw);
  }

  std::vector<uint32_t> all_sizes;
  nlohmann::json shapes = nlohmann::json::array();
  std::string transports;
  for (const Sweep& sw : sweeps) {
    for (uint32_t s : sw.sizes)
      if (std::find(all_sizes.begin(), all_sizes.end(), s) == all_sizes.end()) all_sizes.push_back(s);
    for (const Shape& s : sw.shapes)
      if (std::find(shapes.begin(), shapes.end(), s.name()) == shapes.end()) shapes.push_back(s.name());
    transports += (transports.empty() ? "" : ",") + sw.transport;
  }
  const Sweep& main_sweep = sweeps.back();
  nlohmann::json flows = nlohmann::json::array();
  for (const Sweep& sw : sweeps) flows.push_back(flow_description(sw));
  nlohmann::json config = {{"sizes", all_sizes},
                           {"shapes", shapes},
                           {"repeats", repeats},
                           {"mbytes_per_source", mbytes},
                           {"smoke", opt.smoke},
                           {"ring_bytes", perf::kRingBytes},
                           {"transport", transports},
                           {"segment_bytes", main_sweep.eff_segment_bytes},
                           {"ring_segments", main_sweep.eff_ring_segments},
                           {"peer", opt.smoke ? "shm_ring,tcp_stream"
                                    : main_sweep.transport == "ofi" ? "tcp_stream"
                                                                    : "shm_ring"},
                           {"placement", main_sweep.transport == "ofi" ? main_sweep.place.name() : "one host"},
                           {"latency_round_trips", main_sweep.latency},
                           {"flow", flows.size() == 1 ? flows[0] : flows},
                           {"sluice_env", sluice_env()}};
  if (main_sweep.transport == "ofi") config["sluice_env_flow_jobs"] = {{"SLUICE_TRANSPORT", "ofi"}};
  nlohmann::json report = perf::report_json(env, command, config, results, extras);
  if (!latency.empty()) report["latency"] = latency;
  if (!fabtests.empty()) report["fabtests"] = fabtests;

  std::fputs(perf::report_table(report).c_str(), stdout);
  if (opt.json_file.empty()) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::ofstream f(opt.json_file);
    f << report.dump(2) << '\n';
    if (!f.flush()) {
      progress("cannot write " + opt.json_file);
      throw CLI::RuntimeError(1);
    }
    progress("wrote " + opt.json_file);
  }
  std::fflush(stdout);
}

}  // namespace

void add_perf_command(CLI::App& app) {
  auto opt = std::make_shared<PerfOptions>();
  CLI::App* sub = app.add_subcommand(
      "perf",
      "Measure shuffle throughput against a bound measured in the same run (shm: a plain SPSC ring; "
      "ofi: a kernel TCP stream between the same endpoints)");
  sub->add_option("--transport", opt->transport,
                  "shm (one host, against a plain shm ring) or ofi (SLUICE_TRANSPORT=ofi, against kernel TCP)")
      ->capture_default_str();
  sub->add_option("--sizes", opt->sizes,
                  "Record sizes in bytes, a comma list (multiples of 8, 16..1024)")
      ->capture_default_str();
  sub->add_option("--shapes", opt->shapes, "Flow shapes SOURCESxTARGETS, a comma list")
      ->capture_default_str();
  sub->add_option("--segment-bytes", opt->segment_bytes,
                  "Flow segment payload in bytes (0: the flow default, 8192); also the TCP peer's write size");
  sub->add_option("--ring-segments", opt->ring_segments, "Segments per flow ring (0: the flow default, 16)");
  sub->add_option("--repeats", opt->repeats, "Runs of every point (median/min/max over them)")
      ->capture_default_str();
  sub->add_option("--mbytes", opt->mbytes, "MiB each source (and the baseline) moves per run")
      ->capture_default_str();
  sub->add_option("--latency", opt->latency,
                  "ofi: 64 B round trips per latency run, flow and TCP (0: no latency runs)")
      ->capture_default_str();
  sub->add_option("--netns", opt->netns,
                  "ofi: run the two ends in network namespaces NS_A=IP_A,NS_B=IP_B (root; see "
                  "bench/ofi_netns.sh)");
  sub->add_option("--json", opt->json_file, "Write the JSON report to this file instead of stdout");
  sub->add_flag("--smoke", opt->smoke,
                "A seconds-long run of every path (shm: sizes 16,64, shapes 1x1,2x2; ofi: 64 B 1x1 and "
                "its TCP peer; 1 repeat, 2 MiB)");
  sub->callback([opt] {
    try {
      run_perf(*opt);
    } catch (const CLI::RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      progress(std::string("error: ") + e.what());
      throw CLI::RuntimeError(1);
    }
  });
  perf::add_perf_worker_command(app);
  perf::add_perf_tcp_command(app);
}

}  // namespace sluice::tool
