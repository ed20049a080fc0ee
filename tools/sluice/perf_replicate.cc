// Replicate modes: fan-out throughput of a replicate flow, unordered
// ("replicate") and with one global order ("replicate_ordered", a sequence
// number per 8 KiB segment from the flow's sequencer).
//
// Every source pushes bytes / B records and closes; every target consumes
// every record of every source, copying each out and folding its key into a
// checksum. records = records delivered (sources x n x targets), so the
// bandwidth is what all targets together received; time: the slowest
// target. The run fails unless every target got every record once.
#include <memory>
#include <stdexcept>

#include "perf_clock.h"
#include "perf_mode.h"
#include "perf_records.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
nlohmann::json measure(Cluster& c, const WorkerArgs& a, bool ordered) {
  using R = Rec<B>;
  const std::string name = std::string(ordered ? "perf-ord-" : "perf-rep-") + std::to_string(B) + "-" +
                           std::to_string(a.rep);
  const std::vector<Endpoint> src = source_endpoints(c, a), dst = target_endpoints(c, a);
  // A throughput run, not a gap test: a generous gap timeout on a loaded machine.
  auto spec = replicate<R>(name).sources(src).targets(dst).ordered(ordered).gap_timeout(std::chrono::seconds(30));
  spec.segment_bytes(segment_bytes_for(a.segment_bytes, B) + (ordered ? 8 : 0));
  if (a.ring_segments != 0) spec.ring_segments(a.ring_segments);
  c.declare(spec);
  const uint32_t rank = c.rank();
  const uint64_t n = a.bytes / B;
  auto rec = std::make_unique<R>();
  if (rank < a.sources) {
    Source<R> out = c.source(spec, 0);
    fill_template_record(rec.get());
    const uint64_t first = uint64_t{rank} * n;
    c.barrier(name + "-go");
    const CpuTimer t;
    for (uint64_t i = 0; i < n; ++i) {
      rec->key = key_of(first + i);
      if (out.push(*rec) != Status::kOk) [[unlikely]]
        throw std::runtime_error("push: " + out.error());
    }
    if (out.close() != Status::kOk) throw std::runtime_error("close: " + out.error());
    return {{"role", "S"}, {"records", n}, {"checksum", key_sum(first, n)},
            {"seconds", t.seconds()}, {"cpu_seconds", t.cpu_seconds()}};
  }
  Target<R> in = c.target(spec, 0);
  uint64_t sum = 0, count = 0;
  c.barrier(name + "-go");
  const CpuTimer t;
  while (auto batch = in.consume()) {
    for (const R& r : *batch) sum += take_record<B>(&r, rec.get());
    count += batch->size();
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
  return {{"role", "T"}, {"records", count}, {"checksum", sum}, {"seconds", seconds}, {"cpu_seconds", cpu}};
}

class ReplicateMode final : public PerfMode {
 public:
  explicit ReplicateMode(bool ordered) : ordered_(ordered) {}
  ModeTraits traits() const override {
    return {ordered_ ? "replicate_ordered" : "replicate", "gbytes_per_s", true};
  }
  std::string description() const override {
    return std::string(ordered_ ? "ordered replicate flow (one sequence number per segment)" : "replicate flow") +
           ", Optimize::kBandwidth; every source pushes --mbytes of records to every target; records = deliveries "
           "(sources x records x targets); time: slowest target";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_sized(record_bytes, [&](auto b) { return measure<decltype(b)::value>(c, a, ordered_); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    uint64_t pushed = 0, pushed_sum = 0, got = 0, got_sum = 0;
    double slowest = 0, src_cpu = 0, tgt_cpu = 0;
    for (const nlohmann::json& p : parts) {
      const bool src = p["role"] == "S";
      (src ? pushed : got) += p["records"].get<uint64_t>();
      (src ? pushed_sum : got_sum) += p["checksum"].get<uint64_t>();
      if (!src) slowest = std::max(slowest, p["seconds"].get<double>());
      (src ? src_cpu : tgt_cpu) += p["cpu_seconds"].get<double>();
    }
    const uint64_t per_target = uint64_t{a.sources} * (a.bytes / record_bytes);
    if (pushed != per_target || got != per_target * a.targets || got_sum != pushed_sum * a.targets) {
      throw std::runtime_error("records lost or duplicated with " + std::to_string(record_bytes) +
                               " B records: targets consumed " + std::to_string(got) + ", expected " +
                               std::to_string(per_target * a.targets));
    }
    return {{"records", got},             {"seconds", slowest},         {"cpu_seconds", src_cpu + tgt_cpu},
            {"src_cpu_seconds", src_cpu}, {"tgt_cpu_seconds", tgt_cpu}};
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
