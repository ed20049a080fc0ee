// apps/nam/ragg.h: distributed GROUP BY key: COUNT(*), SUM(value) on
// network-attached memory (paper section 5.3), run by every compute thread
// of the job together.
//
// - RDMA aggregation: each thread reads its share of the rows (one-sided
//   reads) and pre-aggregates them in a cache-sized table of at most
//   --table-entries groups; when a new group finds the table full, the whole
//   table is spilled, group by group, into P overflow partitions through the
//   chunk buffers of part_store.h (one-sided writes into the memory servers),
//   and emptied. After a barrier, threads claim partitions one at a time and
//   post-aggregate each (every group lives in exactly one partition).
// - Hierarchical aggregation (the shared-nothing baseline): each thread
//   aggregates its whole share locally (a table that grows with the groups),
//   then sends every group over a shuffle flow to the thread that owns its
//   key (the global union), which post-aggregates what it receives.
//
// Each thread returns its groups, the rows they cover and the checksum of
// olap.h; the sums over threads must equal the reference's.
//
// Thread safety: as rrj.h.
#pragma once

#include <sluice/sluice.h>

#include <string>

#include "olap.h"
#include "part_store.h"

namespace sluice::nam::olap {

struct AggConfig {
  AggInput input;
  uint32_t partitions = 0;  // overflow partitions (0: chosen from the rows)
  uint32_t chunk_bytes = 2048;
  double space_factor = 1.25;
  bool background = true;          // ship full buffers from a shipper thread (part_store.h)
  uint32_t table_entries = 16384;  // the cache-sized pre-aggregation table (24 B a group)
};

inline const char* kRegionRows = "olap-rows";

StoreLayout ragg_layout(const AggConfig& config, uint32_t servers, uint32_t workers);
ShuffleSpec<Partial> hagg_flow(const std::vector<Endpoint>& workers, const std::string& tag);

ThreadStats run_ragg(const Team& team, const AggConfig& config, const std::string& store_region);
ThreadStats run_hagg(const Team& team, const AggConfig& config, const ShuffleSpec<Partial>& flow,
                     const std::string& tag);

}  // namespace sluice::nam::olap
