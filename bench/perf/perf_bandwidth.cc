// Bandwidth mode: streaming throughput of a shuffle flow (Optimize::kBandwidth).
//
// Every source pushes bytes / B records (keys key_of(rank * n + i)) and
// closes; every target copies each record out into scratch and folds its key
// into a checksum. Counts and key checksums of all ranks must add up, else
// the run fails. Time: the slowest target, from the barrier to end-of-flow;
// CPU: getrusage of every rank over its own timed interval, split by side.
#include "perf_stream.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
RankPart measure_bandwidth(Cluster& c, const WorkerArgs& a) {
  using R = Rec<B>;
  const std::string name = "perf-bw-" + std::to_string(B) + "-" + std::to_string(a.rep);
  auto spec =
      shuffle<R>(name).sources(source_endpoints(c, a)).targets(target_endpoints(c, a)).key(&R::key);
  spec.segment_bytes(segment_bytes_for(a.segment_bytes, B));
  if (a.ring_segments != 0) spec.ring_segments(a.ring_segments);
  auto flow = c.declare(spec);
  return run_stream<B>(c, a, spec, name);
}

class BandwidthMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"bandwidth", "gbytes_per_s", true}; }
  std::string description() const override {
    return "shuffle flow, key-hash routing, Optimize::kBandwidth; every source pushes --mbytes of "
           "records and "
           "closes, every target copies each record out and checksums its key; time: slowest "
           "target";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_part(record_bytes, false,
                    [&](auto b) { return measure_bandwidth<decltype(b)::value>(c, a); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    return merge_stream(parts, a, record_bytes, 1);
  }
  std::vector<std::string> builtin_series(const std::string& transport) const override {
    if (transport == "shm") return {"shm_ring", "memcpy", "tcp_stream"};
    return {"tcp_stream"};
  }
};

}  // namespace

const PerfMode& bandwidth_mode() {
  static const BandwidthMode mode;
  return mode;
}

}  // namespace sluice::tool::perf
