#include "run_results.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace sluice::nam {

namespace {

int bucket_of(uint32_t us) {
  if (us <= 1) return 0;
  return std::min(kBuckets - 1,
                  static_cast<int>(std::log(static_cast<double>(us)) / std::log(1.1)));
}

// `shift`: counts[0] goes to a.timeline[shift] (a replacement's clients
// start later than the run).
void add_timeline(Summary& a, double start_unix, const uint32_t* counts, size_t n,
                  size_t shift = 0) {
  if (start_unix > 0 && (a.start_unix == 0 || start_unix < a.start_unix)) a.start_unix = start_unix;
  for (size_t i = 0; i < n && i + shift < kTimelineSlots; ++i) a.timeline[i + shift] += counts[i];
}

}  // namespace

void add(Summary& a, const ClientResult& r) {
  a.clients += 1;
  a.commits += r.commits;
  a.checkouts += r.checkouts;
  a.read_only += r.read_only;
  a.conflicts += r.conflicts;
  a.too_old += r.too_old;
  a.out_of_stock += r.out_of_stock;
  a.burned += r.rsi.burned;
  a.overflow_moved += r.rsi.overflow_moved;
  a.overflow_hits += r.rsi.overflow_hits;
  a.forward += r.rsi.recovered_forward;
  a.back += r.rsi.recovered_back;
  a.recovered += r.rsi.clients_recovered;
  a.seconds = std::max(a.seconds, r.seconds);
  for (uint32_t us : r.latency_us) ++a.hist[bucket_of(us)];
  add_timeline(a, r.start_unix, r.timeline.data(), r.timeline.size());
}

void accumulate(Summary& total, const Summary& s, bool shift_timeline) {
  total.clients += s.clients;
  total.commits += s.commits;
  total.checkouts += s.checkouts;
  total.read_only += s.read_only;
  total.conflicts += s.conflicts;
  total.too_old += s.too_old;
  total.out_of_stock += s.out_of_stock;
  total.burned += s.burned;
  total.overflow_moved += s.overflow_moved;
  total.overflow_hits += s.overflow_hits;
  total.forward += s.forward;
  total.back += s.back;
  total.recovered += s.recovered;
  total.seconds = std::max(total.seconds, s.seconds);
  for (int b = 0; b < kBuckets; ++b) total.hist[b] += s.hist[b];
  size_t shift = 0;
  if (shift_timeline && total.start_unix > 0 && s.start_unix > total.start_unix)
    shift =
        static_cast<size_t>(std::llround((s.start_unix - total.start_unix) * 1000 / kTimelineMs));
  add_timeline(total, s.start_unix, s.timeline, kTimelineSlots, shift);
}

uint64_t unix_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double percentile(const Summary& s, double q) {
  uint64_t total = 0;
  for (uint64_t h : s.hist) total += h;
  if (total == 0) return 0;
  const uint64_t want = static_cast<uint64_t>(std::ceil(q * total));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += s.hist[b];
    if (seen >= want) return std::pow(1.1, b + 1);
  }
  return std::pow(1.1, kBuckets);
}

bool run_to_end(Transactions& db, const Options& opt, const WorkloadOptions& w, uint32_t id,
                uint32_t clients, uint32_t rank, ClientResult* out) {
  try {
    *out = run_client(db, w, id, clients, !opt.history.empty());
  } catch (const FencedError& e) {
    std::fprintf(stderr,
                 "sluice-nam: rank %u: %s; it stalled past the recovery timeout and counts as a "
                 "client that died\n",
                 rank, e.what());
    return false;
  }
  if (!opt.history.empty()) {
    std::ofstream file(opt.history + "." + std::to_string(id) + ".jsonl");
    file << out->history;
    if (!file) throw NamError("cannot write the history file " + opt.history);
  }
  return true;
}

}  // namespace sluice::nam
