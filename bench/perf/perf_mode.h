// A mode of `sluice perf`: what the ranks of a flow job do for one record
// size (perf_worker.h runs them), how their parts become one sample, and
// which built-in bounds and peers the parent measures beside it.
//
// Adding a mode is one file, bench/perf/perf_<mode>.cc, that defines
// `const PerfMode& <mode>_mode()`, plus its line in perf_modes.cc (the
// declaration and the entry of the list there). The mode's name is then
// accepted by --modes, passed to bench/peers/run as --mode, and its traits
// pick the metric the ratios compare.
//
// Thread safety: modes are immutable singletons; run_rank runs on the rank's
// main thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "perf_records.h"
#include "perf_stats.h"
#include "sluice/sluice.h"

namespace sluice::tool::perf {

// What every rank of a flow job is told (the worker subcommand's options).
struct WorkerArgs {
  uint32_t sources = 1;
  uint32_t targets = 1;
  uint32_t rep = 0;
  uint64_t bytes = 0;          // bandwidth-like modes: bytes per source per size
  uint32_t round_trips = 0;    // latency-like modes: requested; see round_trips_for
  uint32_t segment_bytes = 0;  // 0: the flow default (raised to fit one record)
  uint32_t ring_segments = 0;  // 0: the flow default
  uint32_t push_batch = 1;     // streaming modes: records per push (> 1: Source::push(span))
};

class PerfMode {
 public:
  virtual ~PerfMode() = default;
  // name (the --modes word), the primary metric and its direction.
  virtual ModeTraits traits() const = 0;
  // One line for the report's config: what the flow job does.
  virtual std::string description() const = 0;
  // Runs on every rank of a job of sources + targets ranks (0..S-1 sources,
  // S..S+T-1 targets) for records of `record_bytes`, and returns this rank's
  // part. Throws std::runtime_error (or sluice::Error) on failure.
  virtual nlohmann::json run_rank(Cluster& c, const WorkerArgs& a, uint32_t record_bytes) const = 0;
  // On rank 0: every rank's part (indexed by rank) merged into one sample
  // (perf_stats.h: records, seconds, cpu_seconds, src_/tgt_cpu_seconds,
  // rtt_us_*). Throws std::runtime_error if records were lost or duplicated.
  virtual nlohmann::json merge(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                               uint32_t record_bytes) const = 0;
  // The built-in bounds and peers measured next to the flow, by the names
  // perf.cc runs: "shm_ring", "memcpy", "tcp_stream" (bandwidth-like),
  // "shm_pingpong", "tcp_pingpong" (latency-like). The first bound named is
  // the one ratio_to_bound uses. `transport` is "shm" or "ofi".
  virtual std::vector<std::string> builtin_series(const std::string& transport) const = 0;
};

// The job's source endpoints (ranks 0..S-1) and target endpoints (S..S+T-1).
std::vector<Endpoint> source_endpoints(const Cluster& c, const WorkerArgs& a);
std::vector<Endpoint> target_endpoints(const Cluster& c, const WorkerArgs& a);

// fn(std::integral_constant<size_t, record_bytes>{}) for a supported size:
// how a mode's run_rank reaches its per-size template.
template <class Fn>
nlohmann::json run_sized(uint32_t record_bytes, Fn fn) {
  nlohmann::json part;
  with_record_size(record_bytes, [&](auto b) { part = fn(b); });
  return part;
}

// Every registered mode, in the order the sweep runs them (perf_modes.cc).
const std::vector<const PerfMode*>& perf_modes();
// The mode of that name, or nullptr.
const PerfMode* find_mode(std::string_view name);
std::vector<std::string> mode_names();

// The flow segment payload for records of `record_bytes` when `requested`
// (0: the 8 KiB default) is asked for: never smaller than one record.
uint32_t segment_bytes_for(uint32_t requested, uint32_t record_bytes);

}  // namespace sluice::tool::perf
