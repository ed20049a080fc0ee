// apps/join/distributed_join.h: the two distributed joins on sluice flows.
//
// Radix hash join (DFI paper §4.2): one shuffle flow per relation, from every
// worker thread of every rank to every worker thread. A source routes each
// tuple by the top bits of its key hash to the target that owns that
// partition (no histogram pass: the flows' rings take whatever arrives). A
// worker pushes its build tuples (the smaller relation's), then at once its
// probe tuples; both flows are open together, and whenever a worker must
// wait for a full ring it drains both of its inboxes. What a target consumes
// it radix-partitions into cache-sized sub-partitions as it arrives. When
// both flows have ended at a worker (every source closed them: the only
// synchronisation; there is no barrier), it builds one sub-partition's hash
// table at a time and probes it with the same sub-partition of the probe
// relation while it is still in the cache.
//
// Fragment-and-replicate join (DFI paper §6.2.1): the smaller relation goes
// to every rank over replicate flows, the larger one stays where it is and
// probes locally. There is one replicate flow per worker slot g: every worker
// is a source of each, and flow g's targets are slot g of every rank. A
// worker sends a tuple of the small relation into the flow of the slot that
// owns its sub-partition, so each rank receives the small relation exactly
// once, already split among its threads, which build their tables in
// parallel. After a barrier between the threads of one rank (not between
// ranks), every thread probes its local fragment of the large relation
// against its rank's tables.
//
// Thread safety: run_join starts its own worker threads (sluice::run_workers
// of sluice/job.h) and returns after they have ended; call it from one thread
// per Cluster.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data.h"
#include "tuples.h"

namespace sluice::join {

enum class Algorithm : uint8_t { kRadix, kReplicate, kAuto };
const char* to_string(Algorithm a);

// What `auto` picks for these relation sizes on `ranks` ranks, and why (a
// sentence for the summary). kRadix or kReplicate.
struct AlgorithmChoice {
  Algorithm algorithm;
  std::string why;
};
AlgorithmChoice choose_algorithm(Algorithm requested, uint64_t r_tuples, uint64_t s_tuples,
                                 uint32_t ranks);

// Seconds per phase, summed over a rank's worker threads:
//   partition  hashing and pushing tuples into flows (over shm this
//              includes the one copy into the target's ring);
//   network    inside flow calls that wait: for data to arrive, for credit,
//              for the other sources' end-of-flow;
//   build      partitioning received build tuples, building the tables;
//   probe      partitioning received probe tuples and probing.
struct PhaseTimes {
  double partition = 0, network = 0, build = 0, probe = 0;
  void add(const PhaseTimes& o) {
    partition += o.partition;
    network += o.network;
    build += o.build;
    probe += o.probe;
  }
};

// One rank's part of a join.
struct RankReport {
  JoinResult result;
  PhaseTimes phases;
  double seconds = 0;               // from the start line until every worker of this rank ended
  double cpu_seconds = 0;           // this process's CPU time in that interval
  uint64_t bytes_in = 0;            // bytes its targets consumed from flows
  uint64_t bytes_remote = 0;        // of those, from other ranks
  uint64_t arena_blocks_added = 0;  // partition buffers that outgrew their estimate
  uint32_t fanout_bits = 0;         // sub-partition bits per worker
  // Empty on success, else the root cause run_workers found
  // (JobFailure::describe(): "rank R was lost: <what failed>" when a peer was
  // lost, else the first worker's failure).
  std::string error;
};

struct JoinConfig {
  Algorithm algorithm = Algorithm::kRadix;  // kRadix or kReplicate (resolve kAuto first)
  uint32_t threads = 1;                     // worker threads per rank
  uint32_t segment_bytes = 0;               // flow segment payload; 0: the flow default
  uint32_t ring_segments = 0;               // segments per ring; 0: the flow default
  // The ranks that take part (ascending, each once), every one of them
  // calling run_join with the same config; the flows and the start barrier
  // span only them, so the other ranks of the job may do something else
  // meanwhile (the memory servers of apps/nam, say). Empty: every rank.
  std::vector<uint32_t> ranks;
  // Test hook (may be empty; sluice-nam-olap's fault tests use it): called
  // by every worker thread after each 4096 tuples it pushed, with the
  // running count.
  std::function<void(uint64_t pushed)> on_progress;
};

// Runs one join on this rank. `r_parts[t]` / `s_parts[t]` are worker t's
// fragments of R and S; `r_total` / `s_total` are the relations' sizes over
// all taking part (every rank must pass the same). Throws
// Error(kInvalidArgument) if config.ranks is not ascending or leaves this
// rank out. Declares the flows itself (names "join-R", "join-S",
// "join-bcast-<g>"; declaring them throws sluice::Error on failure), then
// runs config.threads workers from a start barrier ("join-start", or
// "join-start-<r>-<r>..." for a subset of ranks). Does not throw for what
// fails in the workers (opening their ends, the data plane): the root cause
// comes back in RankReport::error.
template <class T>
RankReport run_join(Cluster& cluster, const JoinConfig& config,
                    const std::vector<std::span<const T>>& r_parts,
                    const std::vector<std::span<const T>>& s_parts, uint64_t r_total,
                    uint64_t s_total);

}  // namespace sluice::join
