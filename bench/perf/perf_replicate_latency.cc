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
#include "perf_stream.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
RankPart measure_replicate_latency(Cluster& c, const WorkerArgs& a) {
  using R = Rec<B>;
  const std::string base = "perf-replat-" + std::to_string(B) + "-" + std::to_string(a.rep);
  const std::vector<Endpoint> src = source_endpoints(c, a), dst = target_endpoints(c, a);
  auto ping = replicate<R>(base + "-ping")
                  .sources(src)
                  .targets(dst)
                  .ordered()
                  .optimize(Optimize::kLatency)
                  .gap_timeout(std::chrono::seconds(30));
  auto pong = shuffle<R>(base + "-pong")
                  .sources({dst[0]})
                  .targets(src)
                  .explicit_targets()
                  .optimize(Optimize::kLatency);
  auto ping_flow = c.declare(ping);
  const uint32_t rank = c.rank();
  const bool echoer = rank == dst[0].rank;
  DeclaredFlow pong_flow;
  if (rank < a.sources || echoer) pong_flow = c.declare(pong);
  if (rank < a.sources) {
    Source<R> out = c.source(ping, 0);
    Target<R> in = c.target(pong, 0);
    return run_round_trips<B>(c, a, out, in, base);
  }
  Target<R> in = c.target(ping, 0);
  if (!echoer) return run_echoes<B>(c, in, nullptr, base);
  Source<R> out = c.source(pong, 0);
  return run_echoes<B>(c, in, &out, base);
}

class ReplicateLatencyMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"replicate_latency", "rtt_us_p50", false}; }
  std::string description() const override {
    return "round trips through an ordered Optimize::kLatency replicate flow (a sequence number "
           "per record, every "
           "target consumes every record) and back from the first target on a Latency shuffle flow";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_part(record_bytes, true,
                    [&](auto b) { return measure_replicate_latency<decltype(b)::value>(c, a); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    return merge_round_trips(parts, a, record_bytes, a.targets);
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
