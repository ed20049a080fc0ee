// Latency mode: round trips through two Optimize::kLatency flows.
//
// "ping" runs sources -> targets, routed by a hash of the key (so with
// several targets each source's records spread over them); "pong" runs
// targets -> sources with explicit targets: a target pushes every record it
// consumes back to the source it came from (Target::last_source() indexes
// ping's sources, which are pong's targets in the same order). Each source
// keeps one record in flight and times every round trip after a warm-up of
// n/10 + 10 (at most 1000). With several sources they compete for the
// targets: the figures are then latency under load.
//
// The flows keep the Latency defaults (one record per segment, 64 per ring)
// whatever --segment-bytes says.
//
// Sample: records = timed round trips of all sources, seconds = the slowest
// source's, rtt_us_p50 = the median of the sources' medians, rtt_us_p99 /
// rtt_us_p999 = the worst source's (nearest rank over its own round trips).
#include "perf_stream.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
RankPart measure_latency(Cluster& c, const WorkerArgs& a) {
  using R = Rec<B>;
  const std::string base = "perf-lat-" + std::to_string(B) + "-" + std::to_string(a.rep);
  const std::vector<Endpoint> src = source_endpoints(c, a), dst = target_endpoints(c, a);
  auto ping = shuffle<R>(base + "-ping")
                  .sources(src)
                  .targets(dst)
                  .key(&R::key)
                  .optimize(Optimize::kLatency);
  auto pong = shuffle<R>(base + "-pong")
                  .sources(dst)
                  .targets(src)
                  .explicit_targets()
                  .optimize(Optimize::kLatency);
  auto ping_flow = c.declare(ping);
  auto pong_flow = c.declare(pong);
  if (c.rank() < a.sources) {
    Source<R> out = c.source(ping, 0);
    Target<R> in = c.target(pong, 0);
    return run_round_trips<B>(c, a, out, in, base);
  }
  Target<R> in = c.target(ping, 0);
  Source<R> out = c.source(pong, 0);
  return run_echoes<B>(c, in, &out, base);
}

class LatencyMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"latency", "rtt_us_p50", false}; }
  std::string description() const override {
    return "round trips through two Optimize::kLatency shuffle flows (ping: sources -> targets by "
           "key hash; pong: "
           "each target echoes to the record's source); each source keeps one record in flight";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_part(record_bytes, true,
                    [&](auto b) { return measure_latency<decltype(b)::value>(c, a); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    return merge_round_trips(parts, a, record_bytes, 1);
  }
  std::vector<std::string> builtin_series(const std::string& transport) const override {
    if (transport == "shm") return {"shm_pingpong", "tcp_pingpong"};
    return {"tcp_pingpong"};
  }
};

}  // namespace

const PerfMode& latency_mode() {
  static const LatencyMode mode;
  return mode;
}

}  // namespace sluice::tool::perf
