// stream/report.h: what a query run reports, per rank and for the job, and
// the order-independent checksum of its output rows.
//
// Thread safety: values.
#pragma once

#include <sluice/hash.h>
#include <sluice/job.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "stream/window.h"

namespace sluice::stream {

// Late records of one window, as they travel (trivially copyable: the
// reports gathered to rank 0, checkpoints).
struct LateCount {
  int64_t window;
  uint64_t records;
};

// What one rank (all its workers) did.
struct Report {
  std::optional<JobFailure> failure;  // empty: the run succeeded; else its root cause
  uint64_t records_in = 0;            // source records ingested
  uint64_t input_bytes = 0;           // their bytes
  uint64_t rows = 0;                  // output rows (upsert: the final one per window and key)
  uint64_t updates = 0;               // upsert: rows handed to the sink (each window and key's
                                      // last one its final row)
  uint64_t checksum = 0;              // sum of row_hash over those rows (order-independent)
  uint64_t bytes_moved = 0;           // bytes consumed from flows (deltas, records, markers)
  uint64_t bytes_remote = 0;          // of them, from other ranks
  uint64_t epochs = 0;                // epochs ended, summed over workers
  uint64_t state_entries = 0;         // peak (key, window) entries, summed over workers
  uint64_t state_bytes = 0;           // peak table bytes, summed over workers
  std::map<int64_t, uint64_t> late;   // window start -> late records (never aggregated)
  std::vector<double> latency_ms;     // per triggered window with rows: watermark passed -> sink
  uint64_t checkpoints = 0;           // checkpoints completed (the most of any worker)
  uint64_t checkpoint_bytes = 0;      // snapshot bytes written (summed over workers)
  uint64_t restored_from = 0;         // the checkpoint this run started from (0: none)
  uint64_t resumed_at = 0;            // source records the restored checkpoint had ingested
  uint64_t recoveries = 0;            // in-job recoveries from a checkpoint (the most of any rank)
  uint64_t replayed = 0;              // records the survivors ingested again after recovering
  uint64_t savepoint = 0;             // the savepoint the run stopped at (0: it ran to the end)
  uint64_t rescaled_from = 0;         // workers of the restored checkpoint, if not this job's
  uint64_t restored_state = 0;        // state entries restores read from checkpoint files
  uint64_t restored_state_max = 0;    // the most of them any one worker read
  double seconds = 0;                 // wall time of the run on this rank
  double cpu_seconds = 0;             // process CPU time during the run
  double checkpoint_pause_ms = 0;     // checkpoints holding the workers' loops, summed over
                                      // workers: barrier alignment and taking snapshots
  double checkpoint_sync_ms = 0;      // of it, taking the snapshots (the files are written
                                      // beside, Flink's asynchronous part)

  // Adds another worker's or rank's figures (seconds: the larger; not the
  // failure).
  void add(const Report& o);
  uint64_t late_total() const;
};

// The hash of one output row that checksums sum up.
template <class R>
uint64_t row_hash(int64_t start, uint64_t key, const R& value) {
  uint64_t h = sluice::hash64(static_cast<uint64_t>(start) ^ 0x9e3779b97f4a7c15ULL);
  h = sluice::hash64(h ^ key);
  unsigned char bytes[sizeof(R)];
  std::memcpy(bytes, &value, sizeof(R));
  return sluice::hash64(h ^
                        sluice::hash_bytes({reinterpret_cast<const std::byte*>(bytes), sizeof(R)}));
}

// The checksum term of an output row: windows are named by their start,
// sessions (whose end depends on their records) by start and end.
template <class R>
uint64_t row_checksum(const Row<R>& r, bool with_end) {
  if (!with_end) return row_hash(r.start, r.key, r.value);
  return row_hash(r.start, r.key ^ sluice::hash64(static_cast<uint64_t>(r.end)), r.value);
}

// p-th percentile (0..100) of `v` (sorted in place); 0 if empty.
double percentile(std::vector<double>& v, double p);

}  // namespace sluice::stream
