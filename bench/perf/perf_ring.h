// The intra-host bounds `sluice perf` compares flows with, measured in the
// same run as the flows because this VM's cross-core speed swings 2-3x with
// vCPU placement:
//  - run_ring: a plain two-process single-producer/single-consumer ring in
//    shared memory that moves the same records with the same per-record work
//    and nothing else (no routing, no segments, no parking);
//  - run_shm_pingpong: two processes bouncing one record through two
//    shared-memory mailboxes, both spinning (the round-trip bound);
//  - run_memcpy: one thread copying the same records into an L2-sized buffer
//    (what one core can copy; a flow copies every record twice).
// Each returns a sample as perf_stats.h defines it (records, seconds,
// cpu_seconds, src_/tgt_cpu_seconds, and rtt_us_* for the ping-pong).
//
// Thread safety: run_ring and run_shm_pingpong fork; call them while the
// process has one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "perf_stats.h"

namespace sluice::tool::perf {

// Ring size in bytes: about L2-sized, so the bound is the cache-to-cache
// transfer rather than DRAM (records over 256 KiB get a ring of 4 slots).
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
nlohmann::json run_ring(const RingOptions& options);

// Forks an initiator and a responder that bounce one record of
// `record_bytes` through two single-slot mailboxes (a sequence word and the
// record, each side spinning with pause), `round_trips` times after a warm-up
// of round_trips/10 + 10. The responder copies the record out and back in,
// as a flow's echo does. Throws std::runtime_error if a child fails.
nlohmann::json run_shm_pingpong(uint32_t record_bytes, uint32_t round_trips);

// Copies `records` records of `record_bytes` (key per record) into
// consecutive slots of a kRingBytes buffer, in this thread.
nlohmann::json run_memcpy(uint32_t record_bytes, uint64_t records);

}  // namespace sluice::tool::perf
