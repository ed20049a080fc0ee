// sluice-perf (also run as `sluice perf`): the project's perftest. For every mode (perf_mode.h:
// bandwidth, latency), transport (shm; ofi on loopback, or across network
// namespaces with --netns), flow shape and record size it measures the flow
// and, in the same run, the bounds and peers it is judged against: built in
// (the shm ring, the shm ping-pong, memcpy: perf_ring.h; kernel TCP:
// perf_tcp.h) and, with --peers bench/peers/run, whichever of UCX, Open MPI,
// ZeroMQ and fabtests are installed. See docs/benchmarks.md.
//
// Structure: this process stays single-threaded between jobs. For every
// transport, repeat and mode it runs the built-in series for every size,
// then the external peers, then one flow job per shape, whose ranks are
// this same program's hidden `worker` subcommand (perf_worker.h), started
// by run_job (one host) or by hand inside the namespaces (--netns). The
// series of one repeat are therefore back to back, which is what the paired
// ratios use.
#include "perf.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "perf_host.h"
#include "perf_mode.h"
#include "perf_records.h"
#include "perf_ring.h"
#include "perf_stats.h"
#include "perf_tcp.h"
#include "perf_worker.h"
#include "process.h"
#include "run.h"
#include "sluice/sluice.h"
#include "tool_util.h"

namespace sluice::tool {
namespace {

using perf::Point;
using perf::Series;
using perf::Shape;

struct PerfOptions {
  std::string modes = "bandwidth,latency";
  std::string transport = "shm";
  std::string sizes = "8,64,256,1k,4k,16k,64k,256k,1m";
  std::string shapes = "1x1,2x1,1x2,2x2";
  uint32_t repeats = 5;
  double mbytes = 1024;
  uint32_t round_trips = 10000;
  int64_t latency = -1;  // the older spelling of --round-trips; 0 drops the latency mode
  std::string peers;     // bench/peers/run, or empty: built-in series only
  std::string json_file;
  bool smoke = false;
  uint32_t segment_bytes = 0;  // 0: the flow default
  uint32_t ring_segments = 0;  // 0: the flow default
  uint32_t push_batch = 1;     // records per Source::push call (> 1: push(span))
  std::string netns;           // ofi: "NS_A=IP_A,NS_B=IP_B"
};

// What --smoke moves per source per run: enough to exercise every path,
// little enough that the CTest finishes in seconds.
constexpr double kSmokeMbytes = 2;
constexpr uint32_t kSmokeRoundTrips = 200;

void progress(const std::string& line) { write_all(STDERR_FILENO, "sluice perf: " + line + "\n"); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Checks --segment-bytes / --ring-segments against every record size (as
// Cluster::declare would).
void check_geometry(const PerfOptions& opt, const std::vector<uint32_t>& sizes) {
  for (uint32_t size : sizes) {
    FlowSpec spec;
    detail::FlowSpecAccess::name(spec) = "perf";
    detail::FlowSpecAccess::record_size(spec) = size;
    detail::FlowSpecAccess::record_align(spec) = 8;
    detail::FlowSpecAccess::sources(spec) = {{0, 0}};
    detail::FlowSpecAccess::targets(spec) = {{1, 0}};
    detail::FlowSpecAccess::segment_bytes(spec) = perf::segment_bytes_for(opt.segment_bytes, size);
    detail::FlowSpecAccess::ring_segments(spec) = opt.ring_segments;
    try {
      spec.validate();
    } catch (const std::exception& e) {
      throw std::invalid_argument("--segment-bytes " + std::to_string(opt.segment_bytes) +
                                  " / --ring-segments " + std::to_string(opt.ring_segments) +
                                  " with " + std::to_string(size) + " B records: " + e.what());
    }
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

using Env = std::map<std::string, std::string>;

// A child: a bench program, a rank or a peer (proc::Process), or the exit
// status of one that could not be started (its reason already printed).
struct Child {
  proc::Process process;
  int failed = 0;
};

// Starts argv (argv[0] looked up in PATH) with this process's environment
// plus `env`, in this process's group (Ctrl-C on the terminal stops it with
// sluice-perf), every signal unblocked; `capture_stdout` pipes its stdout.
Child spawn(const std::vector<std::string>& argv, const Env& env, bool capture_stdout) {
  proc::SpawnOptions o;
  o.argv = argv;
  o.search_path = true;
  if (!env.empty()) o.env = proc::environment_with(env);
  o.stdin_null = false;
  o.out = capture_stdout ? proc::Output::kPipe : proc::Output::kInherit;
  o.new_process_group = false;
  sigset_t none;
  sigemptyset(&none);
  o.signal_mask = none;
  Child c;
  try {
    c.process = proc::Process::spawn(o);
  } catch (const proc::SpawnError& e) {
    progress(std::string("cannot run ") + argv[0] + ": " + e.what());
    c.failed = e.exit_status();
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

// Waits for a child until `deadline`, then kills it. Returns its exit status,
// 128+N for signal N, or 124 when it had to be killed.
int wait_child(Child& c, Clock::time_point deadline) {
  if (c.failed != 0) return c.failed;
  bool timed_out = false;
  const proc::ExitStatus s = c.process.wait_or_kill(deadline, &timed_out);
  return timed_out ? 124 : s.shell_status();
}

void stop_child(Child& c) {
  if (c.failed != 0) return;
  const pid_t pid = c.process.pid();
  c.process.signal_group(SIGTERM);
  if (wait_child(c, Clock::now() + std::chrono::seconds(5)) == 124)
    progress("had to SIGKILL pid " + std::to_string(pid));
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

// What every job of one sweep (one transport and placement) shares.
struct Sweep {
  std::string exe;
  std::string transport;  // "shm" or "ofi"
  Placement place;
  std::vector<const perf::PerfMode*> modes;
  std::vector<Shape> shapes;
  std::vector<uint32_t> sizes;
  std::string sizes_arg;
  uint64_t bytes = 0;
  uint32_t round_trips = 0;
  uint32_t segment_bytes = 0;  // as given (0: default)
  uint32_t ring_segments = 0;  // as given (0: default)
  uint32_t push_batch = 1;
  std::string peers;  // the external peers program, or empty
  bool smoke = false;
};

// Runs one job of `ranks` worker ranks with `args`; ranks below
// `first_in_b` go to the first host. Returns the job's exit status.
int run_ranks(const Sweep& sw, const std::vector<std::string>& args, uint32_t ranks,
              uint32_t first_in_b) {
  const double timeout = sw.smoke ? 120 : 1800;
  std::vector<std::string> command = {sw.exe, "worker"};
  command.insert(command.end(), args.begin(), args.end());
  if (!sw.place.netns) {
    RunOptions ro;
    ro.ranks = ranks;
    ro.command = command;
    ro.timeout_seconds = timeout;
    ro.grace_seconds = 5;
    // The ranks inherit this process's environment, with the sweep's transport.
    ro.env = {{"SLUICE_TRANSPORT", sw.transport}};
    // run_job leaves SIGINT/SIGTERM/SIGCHLD blocked for this thread; restore the
    // mask so that Ctrl-C still stops `sluice perf` between jobs.
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    const int status = run_job(ro);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    return status;
  }
  // By hand in the namespaces: the registry in the first, ranks in both. The
  // secret goes through the environment, never argv, which any user of the
  // machine can read in /proc/<pid>/cmdline.
  const std::string secret = random_secret();
  Child reg = spawn(sw.place.in(false, {sw.exe, "registry", "--bind", sw.place.ip(false) + ":0",
                                        "--world", std::to_string(ranks)}),
                    {{"SLUICE_SECRET", secret}}, true);
  std::string registry;
  for (int i = 0; i < 4 && registry.empty(); ++i) {
    const std::string line =
        reg.failed != 0 ? std::string() : read_line(reg.process.out().get(), 10);
    if (line.rfind("SLUICE_REGISTRY=", 0) == 0) registry = line.substr(16);
    if (line.empty()) break;
  }
  if (registry.empty()) {
    stop_child(reg);
    progress("the registry in " + (*sw.place.netns)[0].netns + " did not report its address");
    return 1;
  }
  std::vector<Child> children;
  for (uint32_t r = 0; r < ranks; ++r) {
    Env env = {{"SLUICE_RANK", std::to_string(r)},
               {"SLUICE_WORLD_SIZE", std::to_string(ranks)},
               {"SLUICE_REGISTRY", registry},
               {"SLUICE_SECRET", secret},
               {"SLUICE_TRANSPORT", "ofi"}};
    children.push_back(spawn(sw.place.in(r >= first_in_b, command), env, false));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(static_cast<int64_t>(timeout));
  int status = 0;
  for (Child& child : children) {
    const int s = wait_child(child, deadline);
    if (status == 0) status = s;
  }
  stop_child(reg);
  return status;
}

std::vector<std::string> geometry_args(const Sweep& sw) {
  std::vector<std::string> a;
  if (sw.segment_bytes != 0)
    a.insert(a.end(), {"--segment-bytes", std::to_string(sw.segment_bytes)});
  if (sw.ring_segments != 0)
    a.insert(a.end(), {"--ring-segments", std::to_string(sw.ring_segments)});
  if (sw.push_batch > 1) a.insert(a.end(), {"--push-batch", std::to_string(sw.push_batch)});
  return a;
}

// Reads the samples `path` holds into one per size (in the order of `sizes`),
// from lines whose `kind` (or, without one, whose `mode`) is `kind`.
std::vector<nlohmann::json> samples_by_size(const std::string& path,
                                            const std::vector<uint32_t>& sizes,
                                            const std::string& kind, std::string* missing) {
  std::vector<nlohmann::json> out(sizes.size());
  for (const nlohmann::json& j : read_lines(path)) {
    if (j.value("kind", j.value("mode", std::string())) != kind || !j.contains("record_bytes"))
      continue;
    const auto it = std::find(sizes.begin(), sizes.end(), j["record_bytes"].get<uint32_t>());
    if (it != sizes.end()) out[static_cast<size_t>(it - sizes.begin())] = j;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (out[i].is_null() && missing->empty()) *missing = std::to_string(sizes[i]) + " B";
  }
  return out;
}

// Runs one flow job (all sizes of one repeat for one mode and shape) and
// returns one sample per size, in the order of `sizes`.
std::vector<nlohmann::json> run_flow_job(const Sweep& sw, const perf::PerfMode& mode,
                                         const Shape& shape, uint32_t rep) {
  const std::string path = temp_file();
  const std::string name = mode.traits().name;
  std::vector<std::string> args = {"--mode",        name,
                                   "--sources",     std::to_string(shape.sources),
                                   "--targets",     std::to_string(shape.targets),
                                   "--sizes",       sw.sizes_arg,
                                   "--rep",         std::to_string(rep),
                                   "--bytes",       std::to_string(sw.bytes),
                                   "--round-trips", std::to_string(sw.round_trips),
                                   "--out",         path};
  for (const std::string& a : geometry_args(sw)) args.push_back(a);
  const int status = run_ranks(sw, args, shape.sources + shape.targets, shape.sources);
  std::string missing;
  std::vector<nlohmann::json> out = samples_by_size(path, sw.sizes, name, &missing);
  ::unlink(path.c_str());
  if (status != 0) {
    progress("the " + sw.transport + " " + name + " " + shape.name() +
             " flow job failed (exit status " + std::to_string(status) +
             "); see the rank messages above");
    throw CLI::RuntimeError(status);
  }
  if (!missing.empty()) {
    progress("the " + name + " " + shape.name() + " flow job exited 0 but reported nothing for " +
             missing);
    throw CLI::RuntimeError(1);
  }
  return out;
}

// The kernel TCP peer of one repeat for every size: "stream" or "pingpong".
std::vector<nlohmann::json> run_tcp_peer(const Sweep& sw, uint32_t rep, const std::string& mode) {
  const std::string path = temp_file();
  const std::vector<std::string> common = {
      "--mode",        mode,
      "--sizes",       sw.sizes_arg,
      "--bytes",       std::to_string(sw.bytes),
      "--chunk-bytes", std::to_string(perf::segment_bytes_for(sw.segment_bytes, 8)),
      "--round-trips", std::to_string(sw.round_trips),
      "--rep",         std::to_string(rep)};
  std::vector<std::string> reader = {sw.exe,  "tcp", "--listen", sw.place.ip(true) + ":0",
                                     "--out", path};
  reader.insert(reader.end(), common.begin(), common.end());
  Child r = spawn(sw.place.in(true, reader), {}, true);
  const std::string line = r.failed != 0 ? std::string() : read_line(r.process.out().get(), 20);
  if (line.rfind("PORT ", 0) != 0) {
    stop_child(r);
    ::unlink(path.c_str());
    progress("the TCP peer's reader did not start (said '" + line + "')");
    throw CLI::RuntimeError(1);
  }
  std::vector<std::string> writer = {sw.exe, "tcp", "--connect",
                                     sw.place.ip(true) + ":" + line.substr(5)};
  writer.insert(writer.end(), common.begin(), common.end());
  Child w = spawn(sw.place.in(false, writer), {}, false);
  const auto deadline = Clock::now() + std::chrono::seconds(sw.smoke ? 120 : 1800);
  const int ws = wait_child(w, deadline);
  const int rs = wait_child(r, deadline);
  std::string missing;
  std::vector<nlohmann::json> out = samples_by_size(path, sw.sizes, "tcp_" + mode, &missing);
  ::unlink(path.c_str());
  if (ws != 0 || rs != 0 || !missing.empty()) {
    progress("the TCP " + mode + " peer failed (writer exit " + std::to_string(ws) +
             ", reader exit " + std::to_string(rs) +
             (missing.empty() ? "" : ", nothing for " + missing) + "); see its messages above");
    throw CLI::RuntimeError(1);
  }
  return out;
}

// A built-in bound or peer: its samples for every size of one repeat.
struct Builtin {
  std::string kind;  // "bound" or "peer"
  std::string note;
};

Builtin builtin_info(const Sweep& sw, const std::string& name) {
  if (name == "shm_ring")
    return {"bound",
            "two-process SPSC shm ring, record-sized slots, publishing every 16 slots, 1:1 (the "
            "bound the "
            "issue defines; N:M flows are compared with this same 1:1 ring)"};
  if (name == "memcpy")
    return {"bound", "one thread copying each record into a 1 MiB buffer; no second process"};
  if (name == "shm_pingpong")
    return {"bound", "two processes bouncing one record through two shm mailboxes, both spinning"};
  if (name == "tcp_stream")
    return {"peer", "kernel TCP stream (" + sw.place.name() + "), writes of " +
                        std::to_string(perf::segment_bytes_for(sw.segment_bytes, 8)) +
                        " B of records (or one record if larger), reader copies every record out"};
  if (name == "tcp_pingpong")
    return {"peer", "kernel TCP ping-pong (" + sw.place.name() +
                        "), TCP_NODELAY, both ends spinning on a non-blocking recv"};
  throw std::logic_error("unknown built-in series " + name);
}

std::vector<nlohmann::json> run_builtin(const Sweep& sw, const std::string& name, uint32_t rep) {
  if (name == "tcp_stream") return run_tcp_peer(sw, rep, "stream");
  if (name == "tcp_pingpong") return run_tcp_peer(sw, rep, "pingpong");
  std::vector<nlohmann::json> out;
  try {
    for (uint32_t size : sw.sizes) {
      if (name == "shm_ring") out.push_back(perf::run_ring({size, sw.bytes / size, 16}));
      if (name == "memcpy") out.push_back(perf::run_memcpy(size, sw.bytes / size));
      if (name == "shm_pingpong")
        out.push_back(perf::run_shm_pingpong(size, perf::round_trips_for(sw.round_trips, size)));
    }
  } catch (const std::exception& e) {
    progress(name + " failed: " + e.what());
    throw CLI::RuntimeError(1);
  }
  return out;
}

// The external peers (bench/peers/run) of one repeat and mode: every line
// it wrote (samples and skips).
std::vector<nlohmann::json> run_external_peers(const Sweep& sw, const std::string& mode,
                                               uint32_t rep) {
  const std::string path = temp_file();
  std::string shapes;
  for (const Shape& s : sw.shapes) shapes += (shapes.empty() ? "" : ",") + s.name();
  std::string sizes;  // in bytes: the harness need not know the k/m suffixes
  for (uint32_t b : sw.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  std::vector<std::string> argv = {sw.peers,
                                   "--mode",
                                   mode,
                                   "--transport",
                                   sw.transport,
                                   "--sizes",
                                   sizes,
                                   "--shapes",
                                   shapes,
                                   "--rep",
                                   std::to_string(rep),
                                   "--mbytes",
                                   std::to_string(static_cast<double>(sw.bytes) / (1 << 20)),
                                   "--round-trips",
                                   std::to_string(sw.round_trips),
                                   "--segment-bytes",
                                   std::to_string(perf::segment_bytes_for(sw.segment_bytes, 8)),
                                   "--bin-dir",
                                   sw.exe.substr(0, sw.exe.rfind('/')),
                                   "--out",
                                   path};
  if (sw.place.netns) {
    const auto& n = *sw.place.netns;
    argv.insert(argv.end(),
                {"--netns", n[0].netns + "=" + n[0].ip + "," + n[1].netns + "=" + n[1].ip});
  }
  Child c = spawn(argv, {}, false);
  const int status = wait_child(c, Clock::now() + std::chrono::seconds(sw.smoke ? 300 : 3600));
  std::vector<nlohmann::json> lines;
  try {
    lines = read_lines(path);
  } catch (const std::exception& e) {
    progress("unreadable output from " + sw.peers + ": " + e.what());
  }
  ::unlink(path.c_str());
  if (status != 0)
    progress(sw.peers + " exited with status " + std::to_string(status) +
             "; keeping what it reported");
  return lines;
}

// Every series of one sweep: [mode][shape or ""][name] -> samples per
// repeat per size, plus how to describe it.
struct Collected {
  Series series;
  std::vector<std::vector<nlohmann::json>> by_size;  // [size][repeat]
};

struct SweepData {
  // key: mode + "/" + name + "/" + shape ("" for the flow: one per shape)
  std::vector<std::pair<std::string, Collected>> series;
  nlohmann::json skipped = nlohmann::json::array();

  Collected& at(const std::string& key, size_t sizes) {
    for (auto& [k, c] : series)
      if (k == key) return c;
    series.emplace_back(key, Collected{});
    series.back().second.by_size.resize(sizes);
    return series.back().second;
  }
};

// Progress of a sweep: steps done of all, and an estimate of what is left.
class Progress {
 public:
  explicit Progress(uint32_t total) : total_(total), t0_(Clock::now()) {}
  void step(const std::string& what) {
    ++done_;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
    const double left = done_ > 0 ? elapsed / done_ * (total_ - done_) : 0;
    progress("[" + std::to_string(done_) + "/" + std::to_string(total_) + ", " +
             fmt("%.0f", elapsed) + " s, ~" + fmt("%.0f", left) + " s left] " + what);
  }

 private:
  uint32_t total_;
  uint32_t done_ = 0;
  Clock::time_point t0_;
};

std::string headline(const nlohmann::json& s, uint32_t bytes) {
  if (s.contains("rtt_us_p50"))
    return "rtt p50 " + fmt("%.2f", s["rtt_us_p50"].get<double>()) + " us, p99 " +
           fmt("%.2f", s.value("rtt_us_p99", 0.0)) + " us";
  const double sec = s.value("seconds", 0.0);
  const double rec = s.value("records", 0.0);
  if (sec <= 0) return "?";
  return fmt("%.2f", rec * bytes / sec / 1e9) + " GB/s, " + fmt("%.1f", rec / sec / 1e6) +
         " M rec/s";
}

std::string size_list(const std::vector<nlohmann::json>& samples,
                      const std::vector<uint32_t>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size() && i < samples.size(); ++i) {
    out += (out.empty() ? "" : "; ") + std::to_string(sizes[i]) + " B " +
           headline(samples[i], sizes[i]);
  }
  return out;
}

uint32_t steps_of(const Sweep& sw, uint32_t repeats) {
  uint32_t per_rep = 0;
  for (const perf::PerfMode* m : sw.modes) {
    per_rep += static_cast<uint32_t>(m->builtin_series(sw.transport).size() + sw.shapes.size());
    if (!sw.peers.empty()) ++per_rep;
  }
  return per_rep * repeats;
}

void run_sweep(const Sweep& sw, uint32_t repeats, Progress* prog, SweepData* data) {
  const size_t n = sw.sizes.size();
  for (uint32_t rep = 0; rep < repeats; ++rep) {
    for (const perf::PerfMode* mode : sw.modes) {
      const std::string m = mode->traits().name;
      const std::string r = sw.transport + " " + m + " repeat " + std::to_string(rep + 1) + "/" +
                            std::to_string(repeats) + ": ";
      for (const std::string& name : mode->builtin_series(sw.transport)) {
        const std::vector<nlohmann::json> got = run_builtin(sw, name, rep);
        Collected& c = data->at(m + "/" + name + "/1x1", n);
        const Builtin info = builtin_info(sw, name);
        c.series = {name, info.kind, "1x1", info.note, "", {}};
        for (size_t i = 0; i < n; ++i) c.by_size[i].push_back(got[i]);
        prog->step(r + name + ": " + size_list(got, sw.sizes));
      }
      if (!sw.peers.empty()) {
        uint32_t count = 0;
        for (const nlohmann::json& j : run_external_peers(sw, m, rep)) {
          if (j.contains("skipped")) {
            const std::string name = j["skipped"];
            bool seen = false;
            for (const auto& s : data->skipped) seen = seen || s["name"] == name;
            if (!seen) data->skipped.push_back({{"name", name}, {"why", j.value("why", "")}});
            continue;
          }
          if (!j.contains("name") || !j.contains("record_bytes")) continue;
          const auto it =
              std::find(sw.sizes.begin(), sw.sizes.end(), j["record_bytes"].get<uint32_t>());
          if (it == sw.sizes.end()) continue;
          const std::string shape = j.value("shape", std::string("1x1"));
          Collected& c = data->at(m + "/" + j["name"].get<std::string>() + "/" + shape, n);
          c.series = {j["name"],
                      j.value("kind", std::string("peer")),
                      shape,
                      j.value("note", std::string()),
                      j.value("command", std::string()),
                      {}};
          c.by_size[static_cast<size_t>(it - sw.sizes.begin())].push_back(j);
          ++count;
        }
        prog->step(r + "external peers: " + std::to_string(count) + " samples");
      }
      for (const Shape& shape : sw.shapes) {
        const std::vector<nlohmann::json> got = run_flow_job(sw, *mode, shape, rep);
        Collected& c = data->at(m + "/sluice/" + shape.name(), n);
        c.series = {"sluice", "flow", shape.name(), "", "", {}};
        for (size_t i = 0; i < n; ++i) c.by_size[i].push_back(got[i]);
        prog->step(r + "flow " + shape.name() + ": " + size_list(got, sw.sizes));
      }
    }
  }
}

// The flow's segment payload and ring length at a point, as the worker sets them.
std::pair<uint32_t, uint32_t> flow_geometry(const Sweep& sw, const std::string& mode,
                                            uint32_t size) {
  if (mode == "latency") return {(size + 7) / 8 * 8, 64};
  const uint32_t segment = perf::segment_bytes_for(sw.segment_bytes, size);
  // The flow's own default, as the mode's spec asks it (an ordered flow's
  // segment is 8 bytes longer: its sequence number).
  FlowSpec spec;
  detail::FlowSpecAccess::ordered(spec) = mode == "replicate_ordered";
  detail::FlowSpecAccess::segment_bytes(spec) = segment + (spec.ordered() ? 8 : 0);
  detail::FlowSpecAccess::ring_segments(spec) = sw.ring_segments;
  return {segment, spec.effective_ring_segments(sw.transport == "ofi")};
}

std::vector<Point> points_of(const Sweep& sw, const SweepData& data) {
  std::vector<Point> out;
  for (const perf::PerfMode* mode : sw.modes) {
    const std::string m = mode->traits().name;
    for (const Shape& shape : sw.shapes) {
      for (size_t i = 0; i < sw.sizes.size(); ++i) {
        Point p;
        p.traits = mode->traits();
        p.transport = sw.transport;
        p.placement = sw.transport == "shm" ? "one host" : sw.place.name();
        p.shape = shape;
        p.record_bytes = sw.sizes[i];
        std::tie(p.segment_bytes, p.ring_segments) = flow_geometry(sw, m, sw.sizes[i]);
        for (const auto& [key, c] : data.series) {
          if (key.rfind(m + "/", 0) != 0) continue;
          Series s = c.series;
          s.samples = c.by_size[i];
          if (s.samples.empty()) continue;
          if (s.kind == "flow") {
            if (s.shape == shape.name()) p.flow = std::move(s);
          } else {
            p.others.push_back(std::move(s));
          }
        }
        out.push_back(std::move(p));
      }
    }
  }
  return out;
}

void run_perf(const PerfOptions& opt) {
  std::vector<Sweep> sweeps;
  uint32_t repeats = opt.repeats;
  double mbytes = opt.mbytes;
  uint32_t round_trips = opt.latency >= 0 ? static_cast<uint32_t>(opt.latency) : opt.round_trips;
  Placement place;
  const std::string exe = proc::self_exe();
  try {
    std::vector<std::string> modes = perf::parse_words(opt.modes, perf::mode_names(), "--modes");
    if (round_trips == 0) std::erase(modes, "latency");
    if (modes.empty())
      throw std::invalid_argument("--modes: nothing left to run (--latency 0 drops latency)");
    const std::vector<std::string> transports =
        perf::parse_words(opt.transport, {"shm", "ofi"}, "--transport");
    if (!opt.netns.empty()) {
      if (transports != std::vector<std::string>{"ofi"})
        throw std::invalid_argument("--netns needs --transport ofi");
      place.netns = perf::parse_netns_hosts(opt.netns);
    }
    auto mode_list = [](const std::vector<std::string>& names) {
      std::vector<const perf::PerfMode*> out;
      for (const std::string& n : names) out.push_back(perf::find_mode(n));
      return out;
    };
    if (opt.smoke) {
      repeats = 1;
      mbytes = kSmokeMbytes;
      round_trips = kSmokeRoundTrips;
      Sweep shm;
      shm.transport = "shm";
      shm.sizes_arg = "8,2k";
      shm.shapes = perf::parse_shapes("1x1,2x2");
      sweeps.push_back(shm);
      // A tiny ofi run so that the ofi perf path cannot rot.
      Sweep ofi;
      ofi.transport = "ofi";
      ofi.place = place;
      ofi.sizes_arg = "64";
      ofi.shapes = perf::parse_shapes("1x1");
      sweeps.push_back(ofi);
      for (Sweep& sw : sweeps) sw.modes = mode_list(perf::mode_names());
    } else {
      for (const std::string& t : transports) {
        Sweep sw;
        sw.transport = t;
        sw.place = place;
        sw.sizes_arg = opt.sizes;
        sw.shapes = perf::parse_shapes(opt.shapes);
        sw.modes = mode_list(modes);
        sweeps.push_back(sw);
      }
    }
    for (Sweep& sw : sweeps) {
      sw.exe = exe;
      sw.smoke = opt.smoke;
      sw.peers = opt.peers;
      sw.round_trips = round_trips;
      sw.sizes = perf::parse_sizes(sw.sizes_arg);
      perf::check_built_sizes(sw.sizes);
      sw.segment_bytes = opt.segment_bytes;
      sw.ring_segments = opt.ring_segments;
      sw.push_batch = opt.push_batch;
      check_geometry(opt, sw.sizes);
    }
    if (!opt.peers.empty() && ::access(opt.peers.c_str(), X_OK) != 0)
      throw std::invalid_argument("--peers " + opt.peers +
                                  ": not an executable file (use bench/peers/run)");
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
        progress("--mbytes " + fmt("%g", mbytes) + " is less than one " + std::to_string(s) +
                 " B record");
        throw CLI::RuntimeError(2);
      }
    }
  }

  // Everything that forks a shell happens before the measurements.
  const perf::Environment env = perf::environment();
  const std::string command = perf::own_command();

  uint32_t total_steps = 0;
  for (const Sweep& sw : sweeps) total_steps += steps_of(sw, repeats);
  Progress prog(total_steps);
  std::vector<Point> points;
  nlohmann::json skipped = nlohmann::json::array();
  for (const Sweep& sw : sweeps) {
    SweepData data;
    run_sweep(sw, repeats, &prog, &data);
    for (Point& p : points_of(sw, data)) points.push_back(std::move(p));
    for (const auto& s : data.skipped) skipped.push_back(s);
  }

  std::vector<uint32_t> all_sizes;
  nlohmann::json shapes = nlohmann::json::array(), transports = nlohmann::json::array();
  nlohmann::json modes = nlohmann::json::object();
  for (const Sweep& sw : sweeps) {
    for (uint32_t s : sw.sizes)
      if (std::find(all_sizes.begin(), all_sizes.end(), s) == all_sizes.end())
        all_sizes.push_back(s);
    for (const Shape& s : sw.shapes)
      if (std::find(shapes.begin(), shapes.end(), s.name()) == shapes.end())
        shapes.push_back(s.name());
    transports.push_back({{"transport", sw.transport},
                          {"placement", sw.transport == "shm" ? "one host" : sw.place.name()}});
    for (const perf::PerfMode* m : sw.modes) modes[m->traits().name] = m->description();
  }
  nlohmann::json config = {
      {"modes", modes},
      {"sizes", all_sizes},
      {"shapes", shapes},
      {"transports", transports},
      {"repeats", repeats},
      {"mbytes_per_source", mbytes},
      {"round_trips", round_trips},
      {"segment_bytes", opt.segment_bytes},
      {"ring_segments", opt.ring_segments},
      {"push_batch", opt.push_batch},
      {"smoke", opt.smoke},
      {"ring_bytes", perf::kRingBytes},
      {"peers_program", opt.peers.empty() ? nlohmann::json(nullptr) : nlohmann::json(opt.peers)},
      {"sluice_env", perf::sluice_env()}};
  const nlohmann::json report = perf::report_json(env, command, config, points, skipped);

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

void add_perf_options(CLI::App& app) {
  auto opt = std::make_shared<PerfOptions>();
  CLI::App* sub = &app;
  sub->description(
      "Measure flows (bandwidth, latency, replicate fan-out and ordering, remote atomics) against "
      "bounds and peers measured in the same run (shm ring, shm "
      "ping-pong, memcpy, kernel TCP; with --peers: UCX, Open MPI, ZeroMQ, fabtests)");
  std::string modes;
  for (const std::string& m : perf::mode_names()) modes += (modes.empty() ? "" : ", ") + m;
  sub->add_option("--modes", opt->modes, "Modes, a comma list (" + modes + ")")
      ->capture_default_str();
  sub->add_option("--transport", opt->transport,
                  "Flow transports, a comma list: shm (one host) and/or ofi (SLUICE_TRANSPORT=ofi, "
                  "libfabric)")
      ->capture_default_str();
  sub->add_option("--sizes", opt->sizes,
                  "Record sizes, a comma list: 8..64 in steps of 8, then powers of two to 1m (k = "
                  "KiB, m = MiB)")
      ->capture_default_str();
  sub->add_option("--shapes", opt->shapes,
                  "Flow shapes SOURCESxTARGETS, a comma list (1:1, N:1, 1:N, N:M)")
      ->capture_default_str();
  sub->add_option("--segment-bytes", opt->segment_bytes,
                  "Bandwidth flows' segment payload in bytes (0: the flow default, 8192; never "
                  "below one record); "
                  "also the TCP stream's write size");
  sub->add_option("--ring-segments", opt->ring_segments,
                  "Segments per bandwidth flow ring (0: the default, 16; ordered flows over ofi: "
                  "512 KiB of segments, 16-64)");
  sub->add_option("--push-batch", opt->push_batch,
                  "Streaming modes: records per push call; above 1 the sources push runs "
                  "(Source::push(span))")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  sub->add_option("--repeats", opt->repeats, "Runs of every point (median/min/max over them)")
      ->capture_default_str();
  sub->add_option("--mbytes", opt->mbytes,
                  "Bandwidth: MiB each source (and each bound and peer) moves per run")
      ->capture_default_str();
  sub->add_option("--round-trips", opt->round_trips,
                  "Latency: round trips per run (at most 256 MiB of records, at least 100)")
      ->capture_default_str();
  sub->add_option("--latency", opt->latency,
                  "The older spelling of --round-trips; 0 leaves the latency mode out");
  sub->add_option("--peers", opt->peers,
                  "External peers program run in every repeat (bench/peers/run): UCX, Open MPI, "
                  "ZeroMQ, fabtests "
                  "where installed");
  sub->add_option("--netns", opt->netns,
                  "ofi: run the two ends in network namespaces NS_A=IP_A,NS_B=IP_B (root; see "
                  "bench/ofi_netns.sh)");
  sub->add_option("--json", opt->json_file, "Write the JSON report to this file instead of stdout");
  sub->add_flag(
      "--smoke", opt->smoke,
      "A seconds-long run of every mode (shm: sizes 8,2k, shapes 1x1,2x2; ofi: 64 B 1x1; 1 repeat, "
      "2 MiB, 200 round trips)");
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
}

}  // namespace sluice::tool
