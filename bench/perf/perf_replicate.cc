// Replicate modes: fan-out throughput of a replicate flow, unordered
// ("replicate") and with one global order ("replicate_ordered", a sequence
// number per 8 KiB segment from the flow's sequencer).
//
// Every source pushes bytes / B records and closes; every target consumes
// every record of every source, copying each out and folding its key into a
// checksum. records = records delivered (sources x n x targets), so the
// bandwidth is what all targets together received; time: the slowest
// target. The run fails unless every target got every record once.
#include "perf_stream.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
RankPart measure_replicate(Cluster& c, const WorkerArgs& a, bool ordered) {
  using R = Rec<B>;
  const std::string name = std::string(ordered ? "perf-ord-" : "perf-rep-") + std::to_string(B) +
                           "-" + std::to_string(a.rep);
  // A throughput run, not a gap test: a generous gap timeout on a loaded machine.
  auto spec = replicate<R>(name)
                  .sources(source_endpoints(c, a))
                  .targets(target_endpoints(c, a))
                  .ordered(ordered)
                  .gap_timeout(std::chrono::seconds(30));
  spec.segment_bytes(segment_bytes_for(a.segment_bytes, B) + (ordered ? 8 : 0));
  if (a.ring_segments != 0) spec.ring_segments(a.ring_segments);
  auto flow = c.declare(spec);
  return run_stream<B>(c, a, spec, name);
}

class ReplicateMode final : public PerfMode {
 public:
  explicit ReplicateMode(bool ordered) : ordered_(ordered) {}
  ModeTraits traits() const override {
    return {ordered_ ? "replicate_ordered" : "replicate", "gbytes_per_s", true};
  }
  std::string description() const override {
    return std::string(ordered_ ? "ordered replicate flow (one sequence number per segment)"
                                : "replicate flow") +
           ", Optimize::kBandwidth; every source pushes --mbytes of records to every target; "
           "records = deliveries "
           "(sources x records x targets); time: slowest target";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_part(record_bytes, false,
                    [&](auto b) { return measure_replicate<decltype(b)::value>(c, a, ordered_); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    return merge_stream(parts, a, record_bytes, a.targets);
  }
  std::vector<std::string> builtin_series(const std::string& transport) const override {
    if (transport == "shm") return {"memcpy", "shm_ring"};
    return {"tcp_stream"};
  }

 private:
  bool ordered_;
};

}  // namespace

const PerfMode& replicate_mode() {
  static const ReplicateMode mode(false);
  return mode;
}

const PerfMode& replicate_ordered_mode() {
  static const ReplicateMode mode(true);
  return mode;
}

}  // namespace sluice::tool::perf
