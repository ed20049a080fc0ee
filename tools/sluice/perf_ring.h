// The physical bound `sluice perf` compares flows with: a plain two-process
// single-producer/single-consumer ring in shared memory that moves the same
// records with the same per-record work and nothing else (no routing, no
// segments, no parking). Measured in the same run as the flows because this
// VM's cross-core speed swings 2-3x with vCPU placement.
//
// Thread safety: run_ring forks; call it while the process has one thread.
#pragma once

#include <cstdint>

#include "perf_stats.h"

namespace sluice::tool::perf {

// Ring size in bytes: about L2-sized, so the bound is the cache-to-cache
// transfer rather than DRAM.
inline constexpr uint64_t kRingBytes = uint64_t{1} << 20;

struct RingOptions {
  uint32_t record_bytes = 64;  // REQUIRES: accepted by parse_sizes
  uint64_t records = 0;        // records to move
  uint32_t publish_every =
      16;  // REQUIRES: a power of two; head/tail published every this many slots
};

// Forks a producer and a consumer over an anonymous MAP_SHARED ring, waits for
// both and returns the consumer's wall time and both processes' CPU time.
// Throws std::runtime_error if a child fails or the checksum is wrong.
Run run_ring(const RingOptions& options);

}  // namespace sluice::tool::perf
