// apps/nam/rrj.h: distributed joins on network-attached memory (paper
// sections 5.1-5.2), run by every compute thread of the job together.
//
// - RRJ (RDMA radix join): each thread reads its share of R and S from the
//   memory servers (one-sided reads), radix-partitions it into P partitions
//   through chunk-sized software-managed buffers that it ships with one-sided
//   writes into the partition store on the memory servers (part_store.h);
//   after a barrier, threads claim partitions one at a time (fetch_add on a
//   shared cursor), read both sides of it back and join it with a
//   cache-sized hash table.
// - GHJ (grace hash join, the shared-nothing baseline): the same reads, then
//   every tuple goes over a shuffle flow to the thread that owns its hash
//   (both relations' flows open at once, driven by one sluice::Worker per
//   thread), which radix-partitions what it received locally into
//   cache-sized blocks and joins them.
// - GHJ+Bloom: first every thread builds Bloom filters of its R and S keys
//   and sends them over a replicate flow to every thread, which ORs them
//   into the global filters; then GHJ ships only the tuples the other
//   side's filter may contain (a semi-join reduction on both sides).
//
// Every algorithm returns a match count and the checksum of olap.h per thread;
// the sums over threads must equal the reference's.
//
// Thread safety: each run_* call belongs to one compute thread; all threads
// of the job must make the same calls in the same order (barriers, flows).
#pragma once

#include <sluice/sluice.h>

#include <array>
#include <string>
#include <vector>

#include "olap.h"
#include "part_store.h"

namespace sluice::nam::olap {

struct JoinConfig {
  JoinInput input;
  uint32_t partitions = 0;      // RRJ radix partitions (0: chosen from |R|)
  uint32_t chunk_bytes = 2048;  // a software-managed buffer, and a chunk in the store
  double space_factor = 1.25;
  bool background = true;  // ship full buffers from a shipper thread (part_store.h)   // the
                           // store's pool, relative to the input
  uint32_t bloom_bits_per_key = 10;
};

// The RRJ's store (the same on every rank). `workers`: compute threads.
StoreLayout rrj_layout(const JoinConfig& config, uint32_t servers, uint32_t workers);

// The flows a GHJ run uses; every compute rank declares all of them before
// its threads run (memory servers take no part).
struct GhjFlows {
  ShuffleSpec<Tuple> r, s;
  ReplicateSpec<std::array<uint64_t, 64>> bloom;
};
GhjFlows ghj_flows(const std::vector<Endpoint>& workers, const std::string& tag);

// Region names of the inputs every memory server exposes.
inline const char* kRegionR = "olap-R";
inline const char* kRegionS = "olap-S";

ThreadStats run_rrj(const Team& team, const JoinConfig& config, const std::string& store_region);
ThreadStats run_ghj(const Team& team, const JoinConfig& config, const GhjFlows& flows, bool bloom,
                    const std::string& tag);

}  // namespace sluice::nam::olap
