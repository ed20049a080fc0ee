#include "perf_worker.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
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
  uint32_t segment_bytes = 0;  // 0: the flow default
  uint32_t ring_segments = 0;  // 0: the flow default
  uint32_t latency = 0;        // > 0: a ping-pong of this many round trips instead
  std::string out;             // "-": stdout
};

// Appends one JSON line to o.out (or stdout for "-").
void emit(const WorkerOptions& o, const nlohmann::json& line) { emit_json_line(o.out, line); }

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
  if (o.segment_bytes != 0) spec.segment_bytes(o.segment_bytes);
  if (o.ring_segments != 0) spec.ring_segments(o.ring_segments);
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

// Latency: ranks 0 and 1 bounce one 64 B record through two Latency-mode
// flows ("ping" 0 -> 1, "pong" 1 -> 0); rank 0 times every round trip.
void run_latency(Cluster& c, const WorkerOptions& o) {
  using R = Rec<64>;
  if (c.world_size() != 2) throw WorkerFailure{"--latency needs a job of exactly 2 ranks"};
  const std::string base = "perf-lat-" + std::to_string(o.rep);
  auto ping = shuffle<R>(base + "-ping").sources(c.ranks({0})).targets(c.ranks({1})).key(&R::key)
                  .optimize(Optimize::kLatency);
  auto pong = shuffle<R>(base + "-pong").sources(c.ranks({1})).targets(c.ranks({0})).key(&R::key)
                  .optimize(Optimize::kLatency);
  c.declare(ping);
  c.declare(pong);
  const bool first = c.rank() == 0;
  Source<R> out = c.source(first ? ping : pong, 0);
  Target<R> in = c.target(first ? pong : ping, 0);
  R r = make_template_record<64>();
  R scratch;
  const uint32_t warmup = std::min<uint32_t>(o.latency / 10 + 10, 1000);
  const uint32_t total = warmup + o.latency;
  std::vector<double> rtt;
  rtt.reserve(o.latency);
  c.barrier(base + "-go");
  const double cpu0 = cpu_seconds();
  const auto start = Clock::now();
  for (uint32_t i = 0; i < total; ++i) {
    if (first) {
      const auto t0 = Clock::now();
      r.key = key_of(i);
      if (out.push(r) != Status::kOk) throw WorkerFailure{"push: " + out.error()};
      auto batch = in.consume();
      if (!batch || batch->size() != 1) throw WorkerFailure{"consume: " + in.error()};
      if (take_record<64>(&(*batch)[0], &scratch) != key_of(i)) throw WorkerFailure{"pong carries the wrong key"};
      if (i >= warmup) rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      auto batch = in.consume();
      if (!batch || batch->size() != 1) throw WorkerFailure{"consume: " + in.error()};
      r.key = take_record<64>(&(*batch)[0], &scratch);
      if (out.push(r) != Status::kOk) throw WorkerFailure{"push: " + out.error()};
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu0;
  if (out.close() != Status::kOk) throw WorkerFailure{"close: " + out.error()};
  while (in.consume()) {
  }
  if (in.status() != Status::kEndOfFlow) throw WorkerFailure{"consume: " + in.error()};
  const std::vector<std::string> cpus = c.allgather(base + "-cpu", std::to_string(cpu));
  if (first) {
    double all_cpu = 0;
    for (const std::string& s : cpus) all_cpu += std::stod(s);
    emit(o, {{"kind", "latency"},
             {"rep", o.rep},
             {"record_bytes", 64},
             {"round_trips", o.latency},
             {"rtt_us_median", percentile(rtt, 50) * 1e6},
             {"rtt_us_p99", percentile(rtt, 99) * 1e6},
             {"rtt_us_min", percentile(rtt, 0) * 1e6},
             {"seconds", seconds},
             {"cpu_seconds", all_cpu}});
  }
}

void run_worker(const WorkerOptions& o) {
  Cluster c = Cluster::join();
  if (o.latency > 0) {
    run_latency(c, o);
    return;
  }
  const std::vector<uint32_t> sizes = parse_sizes(o.sizes);
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
      emit(o, line);
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
  sub->add_option("--sizes", o->sizes);
  sub->add_option("--rep", o->rep)->required();
  sub->add_option("--bytes", o->bytes);
  sub->add_option("--segment-bytes", o->segment_bytes);
  sub->add_option("--ring-segments", o->ring_segments);
  sub->add_option("--latency", o->latency);
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
