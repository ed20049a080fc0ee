// Atomics mode: remote 64-bit atomics on a one-sided memory region.
//
// The first target rank exposes a region; every source runs a loop of
// fetch_add on one shared word, then compare_and_swap increments (read,
// CAS until it sticks) on another, timing each operation after a warm-up.
// Targets only host or wait. The run fails unless both words end exactly at
// sources x operations. records = timed operations of all sources (so
// records_per_s is atomic operations per second); rtt_us_* are per
// operation (fetch_add and CAS pooled). The record size only scales the
// number of operations (round_trips_for), the operands are 8 bytes.
#include <algorithm>
#include <stdexcept>

#include "perf_clock.h"
#include "perf_mode.h"
#include "perf_stream.h"

namespace sluice::tool::perf {
namespace {

nlohmann::json measure_atomics(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) {
  const std::string name =
      "perf-atomics-" + std::to_string(record_bytes) + "-" + std::to_string(a.rep);
  const uint32_t rank = c.rank();
  const uint32_t owner = a.sources;  // the first target rank
  MemoryRegion region;
  if (rank == owner) region = c.expose(name, 64);
  const uint32_t n = round_trips_for(a.round_trips, record_bytes);
  const uint32_t warmup = warmup_for(n);
  if (rank >= a.sources) {
    c.barrier(name + "-go");
    c.barrier(name + "-done");
    uint64_t words[2] = {0, 0};
    if (rank == owner) {
      RemoteRegion r = c.open_region(name, owner);
      if (r.read(0, std::as_writable_bytes(std::span(words, 2))) != Status::kOk)
        throw std::runtime_error("read: " + r.error());
    }
    return {{"role", "T"},          {"records", 0},   {"fetch_add_word", words[0]},
            {"cas_word", words[1]}, {"seconds", 0.0}, {"cpu_seconds", 0.0}};
  }
  RemoteRegion r = c.open_region(name, owner);
  std::vector<double> us;
  us.reserve(2 * n);
  c.barrier(name + "-go");
  const CpuTimer t;
  for (uint32_t i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    if (!r.fetch_add(0, 1)) throw std::runtime_error("fetch_add: " + r.error());
    if (i >= warmup) us.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
  }
  uint64_t seen = 0;
  for (uint32_t i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    for (;;) {
      const auto prev = r.compare_and_swap(8, seen, seen + 1);
      if (!prev) throw std::runtime_error("cas: " + r.error());
      if (*prev == seen) break;
      seen = *prev;  // lost a race: retry from what is there
    }
    ++seen;
    if (i >= warmup) us.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  c.barrier(name + "-done");
  return {{"role", "S"},
          {"records", 2 * n},
          {"seconds", seconds},
          {"cpu_seconds", cpu},
          {"path", r.path()},
          {"rtt_us_p50", percentile(us, 50)},
          {"rtt_us_p99", percentile(us, 99)},
          {"rtt_us_p999", percentile(us, 99.9)}};
}

class AtomicsMode final : public PerfMode {
 public:
  ModeTraits traits() const override { return {"atomics", "rtt_us_p50", false}; }
  std::string description() const override {
    return "remote 64-bit fetch_add and compare_and_swap on a memory region the first target rank "
           "exposes; every "
           "source runs its loops against the same two words";
  }
  nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const override {
    return measure_atomics(c, a, record_bytes);
  }
  nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                       uint32_t record_bytes) const override {
    RoundTripSources sources;
    uint64_t fetch_word = 0, cas_word = 0;
    for (const nlohmann::json& p : parts) {
      if (p["role"] == "S") {
        sources.add(p);
      } else {
        fetch_word = std::max(fetch_word, p["fetch_add_word"].get<uint64_t>());
        cas_word = std::max(cas_word, p["cas_word"].get<uint64_t>());
      }
    }
    const uint32_t n = round_trips_for(a.round_trips, record_bytes);
    const uint64_t per_word = uint64_t{a.sources} * (n + warmup_for(n));
    if (fetch_word != per_word || cas_word != per_word) {
      throw std::runtime_error("remote atomics were not exact: fetch_add word " +
                               std::to_string(fetch_word) + ", CAS word " +
                               std::to_string(cas_word) + ", expected " + std::to_string(per_word));
    }
    return sources.sample(0.0);
  }
  std::vector<std::string> builtin_series(const std::string& transport) const override {
    if (transport == "shm") return {"shm_pingpong", "tcp_pingpong"};
    return {"tcp_pingpong"};
  }
};

}  // namespace

const PerfMode& atomics_mode() {
  static const AtomicsMode mode;
  return mode;
}

}  // namespace sluice::tool::perf
