#include "perf_worker.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "perf_records.h"
#include "perf_stats.h"
#include "sluice/sluice.h"

namespace sluice::tool::perf {
namespace {

struct WorkerOptions {
  uint32_t sources = 1;
  uint32_t targets = 1;
  std::string sizes;
  uint32_t rep = 0;
  uint64_t bytes = 0;  // per source per measurement
  std::string out;
};

// A failure that ends the worker: the message is printed once, then the
// exit status tells `sluice perf` (through run_job) that the job failed.
struct WorkerFailure {
  std::string message;
};

double cpu_seconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// What one rank reports about one measurement.
struct RankResult {
  bool source = false;
  uint64_t records = 0;
  uint64_t checksum = 0;
  double seconds = 0;
  double cpu_seconds = 0;

  std::string encode() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%c %" PRIu64 " %" PRIx64 " %.9f %.9f", source ? 'S' : 'T',
                  records, checksum, seconds, cpu_seconds);
    return buf;
  }
  static RankResult decode(const std::string& s) {
    RankResult r;
    char role = 0;
    if (std::sscanf(s.c_str(), "%c %" SCNu64 " %" SCNx64 " %lf %lf", &role, &r.records, &r.checksum,
                    &r.seconds, &r.cpu_seconds) != 5) {
      throw WorkerFailure{"a rank reported an unreadable result '" + s + "'"};
    }
    r.source = role == 'S';
    return r;
  }
};

template <size_t B>
RankResult measure(Cluster& c, const WorkerOptions& o) {
  using R = Rec<B>;
  const std::string name = "perf-" + std::to_string(B) + "-" + std::to_string(o.rep);
  std::vector<uint32_t> src_ranks, dst_ranks;
  for (uint32_t r = 0; r < o.sources; ++r) src_ranks.push_back(r);
  for (uint32_t r = 0; r < o.targets; ++r) dst_ranks.push_back(o.sources + r);
  auto spec = shuffle<R>(name).sources(c.ranks(src_ranks)).targets(c.ranks(dst_ranks)).key(&R::key);
  c.declare(spec);

  const uint32_t rank = c.rank();
  const bool is_source = rank < o.sources;
  const uint64_t n = o.bytes / B;
  RankResult res;
  res.source = is_source;
  if (is_source) {
    Source<R> out = c.source(spec, 0);
    R r = make_template_record<B>();
    const uint64_t first = uint64_t{rank} * n;
    c.barrier(name + "-go");
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      r.key = key_of(first + i);
      if (out.push(r) != Status::kOk) [[unlikely]]
        throw WorkerFailure{"push: " + out.error()};
    }
    if (out.close() != Status::kOk) throw WorkerFailure{"close: " + out.error()};
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    res.cpu_seconds = cpu_seconds() - cpu0;
    res.records = n;
    // Computed, not accumulated: the loop above does only what the ring's producer does.
    res.checksum = key_sum(first, n);
  } else {
    Target<R> in = c.target(spec, 0);
    R scratch;
    uint64_t sum = 0;
    uint64_t count = 0;
    c.barrier(name + "-go");
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    while (auto batch = in.consume()) {
      for (const R& rec : *batch) sum += take_record<B>(&rec, &scratch);
      count += batch->size();
    }
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    res.cpu_seconds = cpu_seconds() - cpu0;
    if (in.status() != Status::kEndOfFlow) throw WorkerFailure{"consume: " + in.error()};
    res.records = count;
    res.checksum = sum;
  }
  return res;
}

void run_worker(const WorkerOptions& o) {
  const std::vector<uint32_t> sizes = parse_sizes(o.sizes);
  Cluster c = Cluster::join();
  if (c.world_size() != o.sources + o.targets) {
    throw WorkerFailure{"the job has " + std::to_string(c.world_size()) + " ranks but --sources " +
                        std::to_string(o.sources) + " --targets " + std::to_string(o.targets) +
                        " need " + std::to_string(o.sources + o.targets)};
  }
  for (uint32_t size : sizes) {
    RankResult mine;
    with_record_size(size, [&](auto b) { mine = measure<decltype(b)::value>(c, o); });
    const std::string tag =
        "perf-" + std::to_string(size) + "-" + std::to_string(o.rep) + "-result";
    const std::vector<std::string> all = c.allgather(tag, mine.encode());

    uint64_t pushed = 0, pushed_sum = 0, got = 0, got_sum = 0;
    double slowest_target = 0, slowest_source = 0, cpu = 0;
    nlohmann::json target_seconds = nlohmann::json::array();
    for (const std::string& s : all) {
      const RankResult r = RankResult::decode(s);
      cpu += r.cpu_seconds;
      if (r.source) {
        pushed += r.records;
        pushed_sum += r.checksum;
        slowest_source = std::max(slowest_source, r.seconds);
      } else {
        got += r.records;
        got_sum += r.checksum;
        slowest_target = std::max(slowest_target, r.seconds);
        target_seconds.push_back(r.seconds);
      }
    }
    const uint64_t expected = uint64_t{o.sources} * (o.bytes / size);
    if (pushed != expected || got != expected || pushed_sum != key_sum(0, expected) ||
        got_sum != pushed_sum) {
      throw WorkerFailure{"records lost or duplicated in flow perf-" + std::to_string(size) + "-" +
                          std::to_string(o.rep) + ": sources pushed " + std::to_string(pushed) +
                          ", targets consumed " + std::to_string(got) + ", expected " +
                          std::to_string(expected) +
                          (got_sum != pushed_sum ? ", key checksums differ" : "")};
    }
    if (c.rank() == 0) {
      nlohmann::json line = {{"record_bytes", size},
                             {"rep", o.rep},
                             {"records", expected},
                             {"seconds", slowest_target},
                             {"cpu_seconds", cpu},
                             {"source_seconds", slowest_source},
                             {"target_seconds", target_seconds}};
      std::ofstream f(o.out, std::ios::app);
      f << line.dump() << '\n';
      if (!f.flush()) throw WorkerFailure{"cannot write results to " + o.out};
    }
  }
}

}  // namespace

void add_perf_worker_command(CLI::App& app) {
  auto o = std::make_shared<WorkerOptions>();
  CLI::App* sub =
      app.add_subcommand("perf-worker", "One rank of a `sluice perf` flow job (internal)");
  sub->group("");  // hidden: only `sluice perf` starts it
  sub->add_option("--sources", o->sources)->required();
  sub->add_option("--targets", o->targets)->required();
  sub->add_option("--sizes", o->sizes)->required();
  sub->add_option("--rep", o->rep)->required();
  sub->add_option("--bytes", o->bytes)->required();
  sub->add_option("--out", o->out)->required();
  sub->callback([o] {
    try {
      run_worker(*o);
    } catch (const WorkerFailure& f) {
      std::fprintf(stderr, "sluice perf-worker: FAILED: %s\n", f.message.c_str());
      throw CLI::RuntimeError(1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice perf-worker: FAILED: %s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::tool::perf
