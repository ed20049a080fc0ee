// Bandwidth mode: streaming throughput of a shuffle flow (Optimize::kBandwidth).
//
// Every source pushes bytes / B records (keys key_of(rank * n + i)) and
// closes; every target copies each record out into scratch and folds its key
// into a checksum. Counts and key checksums of all ranks must add up, else
// the run fails. Time: the slowest target, from the barrier to end-of-flow;
// CPU: getrusage of every rank over its own timed interval, split by side.
#include <memory>
#include <stdexcept>

#include "perf_mode.h"
#include "perf_records.h"
#include "perf_clock.h"

namespace sluice::tool::perf {
namespace {

template <size_t B>
nlohmann::json measure(Cluster& c, const WorkerArgs& a) {
  using R = Rec<B>;
  const std::string name = "perf-bw-" + std::to_string(B) + "-" + std::to_string(a.rep);
  const std::vector<Endpoint> src = source_endpoints(c, a), dst = target_endpoints(c, a);
  auto spec = shuffle<R>(name).sources(src).targets(dst).key(&R::key);
  spec.segment_bytes(segment_bytes_for(a.segment_bytes, B));
  if (a.ring_segments != 0) spec.ring_segments(a.ring_segments);
  c.declare(spec);

  const uint32_t rank = c.rank();
  const uint64_t n = a.bytes / B;
  // Records of up to 1 MiB: on the heap, not the stack.
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
    // The checksum is computed, not accumulated: the loop does only what the ring's producer does.
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

class BandwidthMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"bandwidth", "gbytes_per_s", true}; }
  std::string description() const override {
    return "shuffle flow, key-hash routing, Optimize::kBandwidth; every source pushes --mbytes of records and "
           "closes, every target copies each record out and checksums its key; time: slowest target";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return run_sized(record_bytes, [&](auto b) { return measure<decltype(b)::value>(c, a); });
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    uint64_t pushed = 0, pushed_sum = 0, got = 0, got_sum = 0;
    double slowest_target = 0, slowest_source = 0, src_cpu = 0, tgt_cpu = 0;
    for (const nlohmann::json& p : parts) {
      const bool src = p["role"] == "S";
      (src ? pushed : got) += p["records"].get<uint64_t>();
      (src ? pushed_sum : got_sum) += p["checksum"].get<uint64_t>();
      double& slowest = src ? slowest_source : slowest_target;
      slowest = std::max(slowest, p["seconds"].get<double>());
      (src ? src_cpu : tgt_cpu) += p["cpu_seconds"].get<double>();
    }
    const uint64_t expected = uint64_t{a.sources} * (a.bytes / record_bytes);
    if (pushed != expected || got != expected || pushed_sum != key_sum(0, expected) || got_sum != pushed_sum) {
      throw std::runtime_error("records lost or duplicated with " + std::to_string(record_bytes) +
                               " B records: sources pushed " + std::to_string(pushed) + ", targets consumed " +
                               std::to_string(got) + ", expected " + std::to_string(expected) +
                               (got_sum != pushed_sum ? ", key checksums differ" : ""));
    }
    return {{"records", expected},          {"seconds", slowest_target},   {"cpu_seconds", src_cpu + tgt_cpu},
            {"src_cpu_seconds", src_cpu},   {"tgt_cpu_seconds", tgt_cpu}, {"source_seconds", slowest_source}};
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
