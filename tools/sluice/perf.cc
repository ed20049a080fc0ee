// `sluice perf`: shared-memory shuffle throughput of flows of several shapes
// and record sizes, each next to the physical bound measured in the same run
// (a plain two-process SPSC ring, perf_ring.h). See docs/benchmarks.md.
//
// Structure: this process stays single-threaded between jobs. For every
// repeat it first runs the baseline ring for every size (fork), then one
// flow job per shape through run_job, whose ranks are this same binary's
// hidden `perf-worker` subcommand (perf_worker.h). Baseline and flow runs of
// one repeat are therefore back to back, which is what the paired ratio uses.
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "perf_ring.h"
#include "perf_stats.h"
#include "perf_worker.h"
#include "run.h"
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

// Runs one flow job (all sizes of one repeat for one shape) and returns one
// Run per size, in the order of `sizes`.
std::vector<Run> run_flow_job(const std::string& exe, const Shape& shape,
                              const std::string& sizes_arg, const std::vector<uint32_t>& sizes,
                              uint32_t rep, uint64_t bytes, bool smoke) {
  char path[] = "/tmp/sluice-perf-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::close(fd);
  RunOptions ro;
  ro.ranks = shape.sources + shape.targets;
  ro.command = {exe,         "perf-worker",
                "--sources", std::to_string(shape.sources),
                "--targets", std::to_string(shape.targets),
                "--sizes",   sizes_arg,
                "--rep",     std::to_string(rep),
                "--bytes",   std::to_string(bytes),
                "--out",     path};
  ro.timeout_seconds = smoke ? 120 : 1800;
  ro.grace_seconds = 5;
  // run_job leaves SIGINT/SIGTERM/SIGCHLD blocked for this thread; restore the
  // mask so that Ctrl-C still stops `sluice perf` between jobs.
  sigset_t saved;
  pthread_sigmask(SIG_SETMASK, nullptr, &saved);
  const int status = run_job(ro);
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);

  std::vector<Run> runs(sizes.size());
  std::vector<bool> seen(sizes.size(), false);
  {
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);) {
      if (line.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      const auto it = std::find(sizes.begin(), sizes.end(), j["record_bytes"].get<uint32_t>());
      if (it == sizes.end()) continue;
      const size_t i = static_cast<size_t>(it - sizes.begin());
      runs[i] = Run{j["records"].get<double>(), j["seconds"].get<double>(),
                    j["cpu_seconds"].get<double>()};
      seen[i] = true;
    }
  }
  ::unlink(path);
  if (status != 0) {
    progress("the " + shape.name() + " flow job failed (exit status " + std::to_string(status) +
             "); see the rank messages above");
    throw CLI::RuntimeError(status);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!seen[i]) {
      progress("the " + shape.name() + " flow job exited 0 but reported no result for " +
               std::to_string(sizes[i]) + " B records");
      throw CLI::RuntimeError(1);
    }
  }
  return runs;
}

void run_perf(const PerfOptions& opt) {
  std::vector<uint32_t> sizes;
  std::vector<Shape> shapes;
  uint32_t repeats = opt.repeats;
  double mbytes = opt.mbytes;
  std::string sizes_arg = opt.sizes;
  try {
    if (opt.smoke) {
      sizes_arg = "16,64";
      shapes = perf::parse_shapes("1x1,2x2");
      repeats = 1;
      mbytes = kSmokeMbytes;
    } else {
      shapes = perf::parse_shapes(opt.shapes);
    }
    sizes = perf::parse_sizes(sizes_arg);
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
  for (uint32_t s : sizes) {
    if (bytes / s == 0) {
      progress("--mbytes " + fmt("%g", mbytes) + " is less than one " + std::to_string(s) +
               " B record");
      throw CLI::RuntimeError(2);
    }
  }

  // Everything that forks a shell happens before the measurements.
  const perf::Environment env = environment();
  const std::string command = own_command();
  const std::string exe = self_exe();
  const bool extra_64 = std::find(sizes.begin(), sizes.end(), 64u) != sizes.end();

  std::vector<std::vector<Run>> ring(sizes.size());
  std::vector<Run> ring_every_slot;
  std::vector<std::vector<std::vector<Run>>> flow(shapes.size(),
                                                  std::vector<std::vector<Run>>(sizes.size()));

  for (uint32_t rep = 0; rep < repeats; ++rep) {
    const std::string r =
        "repeat " + std::to_string(rep + 1) + "/" + std::to_string(repeats) + ": ";
    try {
      for (size_t i = 0; i < sizes.size(); ++i) {
        const Run run = perf::run_ring({sizes[i], bytes / sizes[i], 16});
        ring[i].push_back(run);
        progress(r + "ring 1:1 " + std::to_string(sizes[i]) +
                 " B: " + fmt("%.1f", run.records / run.seconds / 1e6) + " M rec/s");
      }
      if (extra_64) {
        const Run run = perf::run_ring({64, bytes / 64, 1});
        ring_every_slot.push_back(run);
        progress(r + "ring 1:1 64 B publishing every slot: " +
                 fmt("%.1f", run.records / run.seconds / 1e6) + " M rec/s");
      }
    } catch (const std::exception& e) {
      progress(std::string("baseline ring failed: ") + e.what());
      throw CLI::RuntimeError(1);
    }
    for (size_t s = 0; s < shapes.size(); ++s) {
      const std::vector<Run> runs =
          run_flow_job(exe, shapes[s], sizes_arg, sizes, rep, bytes, opt.smoke);
      for (size_t i = 0; i < sizes.size(); ++i) {
        flow[s][i].push_back(runs[i]);
        progress(r + "flow " + shapes[s].name() + " " + std::to_string(sizes[i]) +
                 " B: " + fmt("%.1f", runs[i].records / runs[i].seconds / 1e6) + " M rec/s");
      }
    }
  }

  std::vector<Result> results;
  for (size_t s = 0; s < shapes.size(); ++s) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      Result res;
      res.shape = shapes[s];
      res.record_bytes = sizes[i];
      res.flow = flow[s][i];
      res.baseline = ring[i];
      res.baseline_publish_every = 16;
      results.push_back(std::move(res));
    }
  }
  std::vector<perf::BaselineRow> extras;
  if (extra_64) extras.push_back({64, 1, ring_every_slot});

  nlohmann::json config = {{"sizes", sizes},
                           {"shapes", nlohmann::json::array()},
                           {"repeats", repeats},
                           {"mbytes_per_source", mbytes},
                           {"smoke", opt.smoke},
                           {"ring_bytes", perf::kRingBytes},
                           {"flow",
                            "shm shuffle, key-hash routing, Optimize::kBandwidth defaults "
                            "(8 KiB segments, 16 per ring), one endpoint per rank"},
                           {"sluice_env", sluice_env()}};
  for (const Shape& s : shapes) config["shapes"].push_back(s.name());
  const nlohmann::json report = perf::report_json(env, command, config, results, extras);

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
      "perf", "Measure shm shuffle throughput against a plain SPSC ring measured in the same run");
  sub->add_option("--sizes", opt->sizes,
                  "Record sizes in bytes, a comma list (multiples of 8, 16..1024)")
      ->capture_default_str();
  sub->add_option("--shapes", opt->shapes, "Flow shapes SOURCESxTARGETS, a comma list")
      ->capture_default_str();
  sub->add_option("--repeats", opt->repeats, "Runs of every point (median/min/max over them)")
      ->capture_default_str();
  sub->add_option("--mbytes", opt->mbytes, "MiB each source (and the ring) moves per run")
      ->capture_default_str();
  sub->add_option("--json", opt->json_file, "Write the JSON report to this file instead of stdout");
  sub->add_flag("--smoke", opt->smoke,
                "A seconds-long run of every path (sizes 16,64, shapes 1x1,2x2, 1 repeat, 2 MiB)");
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
}

}  // namespace sluice::tool
