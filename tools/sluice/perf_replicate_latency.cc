// Replicate latency mode: the round trip of one record through an ordered
// replicate flow (Optimize::kLatency: a sequence number per record) and
// back. Every source keeps one record in flight; every target consumes
// every record, and the first target echoes each to its source on a
// Latency-mode shuffle flow. The round trip therefore includes taking the
// sequence number (a fetch-and-add on the sequencer), the fan-out to all
// targets, and the ordered merge at the first target.
//
// Sample: records = timed round trips of all sources; rtt_us_p50 = the
// median of the sources' medians, p99 / p99.9 = the worst source's. The run
// fails unless every target consumed every record once.
#include <algorithm>
#include <memory>
#include <stdexcept>

#include "perf_clock.h"
#include "perf_mode.h"
#include "perf_records.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
nlohmann::json measure(Cluster& c, const WorkerArgs& a) {
  using R = Rec<B>;
  const std::string base = "perf-replat-" + std::to_string(B) + "-" + std::to_string(a.rep);
  const std::vector<Endpoint> src = source_endpoints(c, a), dst = target_endpoints(c, a);
  auto ping = replicate<R>(base + "-ping").sources(src).targets(dst).ordered().optimize(Optimize::kLatency)
                  .gap_timeout(std::chrono::seconds(30));
  auto pong = shuffle<R>(base + "-pong").sources({dst[0]}).targets(src).explicit_targets()
                  .optimize(Optimize::kLatency);
  c.declare(ping);
  const uint32_t rank = c.rank();
  const bool echoer = rank == dst[0].rank;
  if (rank < a.sources || echoer) c.declare(pong);
  auto rec = std::make_unique<R>();
  auto scratch = std::make_unique<R>();
  fill_template_record(rec.get());
  const uint32_t n = round_trips_for(a.round_trips, B);
  const uint32_t warmup = std::min<uint32_t>(n / 10 + 10, 1000);

  if (rank < a.sources) {
    Source<R> out = c.source(ping, 0);
    Target<R> in = c.target(pong, 0);
    std::vector<double> rtt;
    rtt.reserve(n);
    c.barrier(base + "-go");
    const CpuTimer t;
    for (uint32_t i = 0; i < warmup + n; ++i) {
      const auto t0 = Clock::now();
      rec->key = key_of(uint64_t{rank} << 32 | i);
      if (out.push(*rec) != Status::kOk) throw std::runtime_error("push: " + out.error());
      auto batch = in.consume();
      if (!batch || batch->size() != 1) throw std::runtime_error("consume: " + in.error());
      if (take_record<B>(&(*batch)[0], scratch.get()) != rec->key)
        throw std::runtime_error("a round trip came back with another record's key");
      if (i >= warmup) rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
    }
    const double seconds = t.seconds(), cpu = t.cpu_seconds();
    if (out.close() != Status::kOk) throw std::runtime_error("close: " + out.error());
    while (in.consume()) {
    }
    if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
    return {{"role", "S"},           {"records", n},
            {"seconds", seconds},    {"cpu_seconds", cpu},
            {"rtt_us_p50", percentile(rtt, 50)}, {"rtt_us_p99", percentile(rtt, 99)},
            {"rtt_us_p999", percentile(rtt, 99.9)}};
  }
  Target<R> in = c.target(ping, 0);
  Source<R> out;
  if (echoer) out = c.source(pong, 0);
  uint64_t consumed = 0;
  c.barrier(base + "-go");
  const CpuTimer t;
  while (auto batch = in.consume()) {
    const uint32_t back = in.last_source();
    for (const R& r : *batch) {
      rec->key = take_record<B>(&r, scratch.get());
      if (echoer && out.push_to(back, *rec) != Status::kOk) throw std::runtime_error("push: " + out.error());
      ++consumed;
    }
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
  if (echoer && out.close() != Status::kOk) throw std::runtime_error("close: " + out.error());
  return {{"role", "T"}, {"records", consumed}, {"seconds", seconds}, {"cpu_seconds", cpu}};
}

class ReplicateLatencyMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"replicate_latency", "rtt_us_p50", false}; }
  std::string description() const override {
    return "round trips through an ordered Optimize::kLatency replicate flow (a sequence number per record, every "
           "target consumes every record) and back from the first target on a Latency shuffle flow";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_sized(record_bytes, [&](auto b) { return measure<decltype(b)::value>(c, a); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    uint64_t timed = 0, consumed = 0;
    double seconds = 0, src_cpu = 0, tgt_cpu = 0, p99 = 0, p999 = 0;
    std::vector<double> p50;
    for (const nlohmann::json& p : parts) {
      if (p["role"] == "S") {
        timed += p["records"].get<uint64_t>();
        seconds = std::max(seconds, p["seconds"].get<double>());
        src_cpu += p["cpu_seconds"].get<double>();
        p50.push_back(p["rtt_us_p50"].get<double>());
        p99 = std::max(p99, p["rtt_us_p99"].get<double>());
        p999 = std::max(p999, p["rtt_us_p999"].get<double>());
      } else {
        consumed += p["records"].get<uint64_t>();
        tgt_cpu += p["cpu_seconds"].get<double>();
      }
    }
    const uint32_t n = round_trips_for(a.round_trips, record_bytes);
    const uint64_t per_source = n + std::min<uint32_t>(n / 10 + 10, 1000);
    if (timed != uint64_t{a.sources} * n || consumed != uint64_t{a.sources} * per_source * a.targets) {
      throw std::runtime_error("records lost with " + std::to_string(record_bytes) + " B records: targets consumed " +
                               std::to_string(consumed) + " of " +
                               std::to_string(uint64_t{a.sources} * per_source * a.targets));
    }
    return {{"records", timed},           {"seconds", seconds},          {"cpu_seconds", src_cpu + tgt_cpu},
            {"src_cpu_seconds", src_cpu}, {"tgt_cpu_seconds", tgt_cpu}, {"rtt_us_p50", summarize(p50).median},
            {"rtt_us_p99", p99},          {"rtt_us_p999", p999}};
  }
  std::vector<std::string> builtin_series(const std::string& transport) const override {
    if (transport == "shm") return {"shm_pingpong", "tcp_pingpong"};
    return {"tcp_pingpong"};
  }
};

}  // namespace

const PerfMode& replicate_latency_mode() {
  static const ReplicateLatencyMode mode;
  return mode;
}

}  // namespace sluice::tool::perf
