// apps/nam/run_results.h: what sluice-nam's clients report. Each compute
// rank (and each free slot's client, spares.h) leaves a Summary in the
// results area on memory server 0 (a one-sided write, not a gather to rank
// 0: the ranks that report are the ones still alive at the end, which the
// job learns only then), where the reporter adds them up.
//
// Thread safety: plain values and functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "options.h"
#include "txn.h"
#include "workload.h"

namespace sluice::nam {

// The latency histogram: bucket b holds [1.1^b, 1.1^(b+1)) us.
constexpr int kBuckets = 160;
constexpr size_t kTimelineSlots = 1200;  // 2 minutes of kTimelineMs
constexpr uint32_t kMaxClientsPerRank = 64;

// checkouts_of of a client that recovery fenced (FencedError): it counts as
// a client that died.
constexpr uint64_t kFencedClient = UINT64_MAX;

struct Summary {
  // valid: 1 results, 2 the clients failed; left: 1 if the rank left the
  // job after writing them (asked to, sluice run --leave), written after
  // the rest of the summary.
  uint64_t valid, left, clients, commits, checkouts, read_only, conflicts, too_old, out_of_stock,
      burned, forward, back, recovered, overflow_moved, overflow_hits;
  double seconds;
  uint64_t hist[kBuckets];
  uint64_t checkouts_of[kMaxClientsPerRank];  // per client of the rank; kFencedClient: fenced
  char path[32];
  double start_unix;                  // the earliest client's start (0: none)
  uint32_t timeline[kTimelineSlots];  // commits per kTimelineMs
};

// The results area on memory server 0 ("nam-results"), per phase: each
// compute rank's summary; the run's start (CLOCK_REALTIME nanoseconds, set
// by the first compute rank to start its clients); a claim word per client
// slot (spares.h) and the summary of each free slot's client.
struct ResultsArea {
  uint32_t compute = 0, clients = 0;
  uint64_t phase_bytes() const {
    return compute * sizeof(Summary) + 8 + clients * (8 + sizeof(Summary));
  }
  uint64_t summary(size_t phase, uint32_t k) const {
    return phase * phase_bytes() + k * sizeof(Summary);
  }
  uint64_t start(size_t phase) const { return summary(phase, compute); }
  uint64_t claims(size_t phase) const { return start(phase) + 8; }
  uint64_t slot_summary(size_t phase, uint32_t id) const {
    return claims(phase) + 8ull * clients + id * sizeof(Summary);
  }
};

// Adds client result `r` to `a` (a rank's or a slot's summary).
void add(Summary& a, const ClientResult& r);
// Adds one compute rank's summary (or a spare client's) into the total;
// the timeline of one that started later than the total's is shifted.
void accumulate(Summary& total, const Summary& s, bool shift_timeline);
// The latency at quantile q of the summary's histogram, in microseconds.
double percentile(const Summary& s, double q);
// CLOCK_REALTIME now, in nanoseconds.
uint64_t unix_ns();

// Runs client `id` on `db` until the run is over and writes its history
// (--history). False if recovery fenced it: it stalled past
// --recovery-timeout-ms, another client took it for dead and recovered its
// work, so it stops and counts as a client that died (its orders are
// checked as they are).
bool run_to_end(Transactions& db, const Options& opt, const WorkloadOptions& w, uint32_t id,
                uint32_t clients, uint32_t rank, ClientResult* out);

}  // namespace sluice::nam
