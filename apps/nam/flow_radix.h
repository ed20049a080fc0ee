// apps/nam/flow_radix.h: the flow radix join of apps/join (sluice::join::
// run_join, DFI's radix hash join on shuffle flows) as one more algorithm of
// sluice-nam-olap join, on the compute ranks of a job whose other ranks are
// memory servers, over the same data as RRJ and GHJ.
//
// Each compute thread reads its share of R and S from the memory servers
// with one-sided reads (as GHJ does), then run_join, told which ranks take
// part (JoinConfig::ranks: the compute ranks), shuffles both relations to
// the thread that owns each tuple's partition and joins there. run_join
// folds result pairs into apps/join's checksum (join::pair_checksum), not
// olap.h's, so the reference computes that one too
// (olap::JoinResult::flow_checksum).
//
// Thread safety: call from one thread per compute rank (run_join starts the
// rank's worker threads); every compute rank calls it, no memory server.
#pragma once

#include <sluice/sluice.h>

#include <vector>

#include "part_store.h"
#include "rrj.h"

namespace sluice::nam::olap {

// `workers`: every compute thread of the job, rank-major (Team::workers);
// `threads` of them per compute rank. Returns this rank's sums in one
// ThreadStats: a = matches, b = apps/join's checksum; seconds from the start
// barrier of the compute ranks to the end of the join, fetch the reads,
// partition the shuffle (pushing and waiting on flows) and finish building
// and probing (both per thread, averaged); flow_records the tuples this
// rank's threads received. A failure comes back in ThreadStats::error.
ThreadStats run_flow_radix(Cluster& cluster, const JoinConfig& config, uint32_t servers,
                           const std::vector<Endpoint>& workers, uint32_t threads);

}  // namespace sluice::nam::olap
