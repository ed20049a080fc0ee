// The fault worker's shared parts (fault_worker.cc, view_scenarios.cc,
// soak_scenarios.cc): its records and arguments, the lines the tests read
// ("AT rank R record K", "LOST <ms> <error>", "VERIFIED ..."), exactly-once
// totals, and the scenarios kept in files of their own.
#pragma once

#include <sluice/sluice.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "support/job_args.h"

namespace fault_worker {

using sluice::Clock;
using sluice::Status;

struct Rec {
  uint64_t key;
  uint64_t value;
};

struct Args {
  std::string scenario;
  uint64_t n = 10000;
  uint64_t k = 1000;
  uint32_t victim = 2;
  bool try_mode = false;
  bool latency = false;
  std::string fault = "none";  // soak: none, or target (rank --victim destroys its target)
  bool ordered = false;        // soak: an ordered replicate flow instead of a shuffle
  bool abort = false;          // source-abort: Source::abort() instead of destruction
};

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

[[noreturn]] inline void failed(const std::string& what) {
  std::_Exit(sluice::testing::fail(what));
}

// Every rank's mark after K records, for `sluice run --faults-after "AT rank
// R record"`: the launcher kills (or stops) rank R there, unannounced.
inline void mark(const sluice::Cluster& c, uint64_t k) {
  std::printf("AT rank %u record %" PRIu64 "\n", c.rank(), k);
  std::fflush(stdout);
}

inline void lost(Clock::time_point since, const std::string& error) {
  std::printf("LOST %.0f %s\n", ms_since(since), error.c_str());
  std::fflush(stdout);
}

// A survivor's report of the victim: a LOST line carrying lost_peer() as
// "[lost_peer N]" before the message, then a 3 s stay (so that the other
// survivors see the victim's end, not ours) and exit 3. With a Worker, the
// stay keeps consuming through it: the others' pushes into this rank must go
// on until they too run into the victim rather than into this rank's stay.
[[noreturn]] inline void report_lost(Clock::time_point since, const std::string& what,
                                     const std::string& error,
                                     const std::optional<sluice::LostPeer>& peer,
                                     sluice::Worker* keep_consuming = nullptr) {
  const std::string who =
      peer ? "[lost_peer " + std::to_string(peer->rank) + "] " : "[lost_peer none] ";
  lost(since, who + what + ": " + error);
  const auto until = Clock::now() + std::chrono::milliseconds(3000);
  if (keep_consuming != nullptr) {
    while (Clock::now() < until) keep_consuming->idle(keep_consuming->poll());
  }
  std::this_thread::sleep_until(until);
  std::_Exit(3);
}

// Totals of what one rank received: count and an order-independent sum.
struct Totals {
  uint64_t count = 0, sum = 0;
  void add(const Rec& r) {
    ++count;
    sum += mix(r.value);
  }
};

// All ranks' totals must add up to what all ranks pushed.
inline void check_totals(sluice::Cluster& c, const Totals& mine, uint64_t expect_count,
                         uint64_t expect_sum) {
  const std::string me = std::to_string(mine.count) + " " + std::to_string(mine.sum);
  auto all = c.allgather("totals", me);
  if (c.rank() != 0) return;
  uint64_t count = 0, sum = 0;
  for (const std::string& s : all) {
    unsigned long long a = 0, b = 0;
    std::sscanf(s.c_str(), "%llu %llu", &a, &b);
    count += a;
    sum += b;
  }
  if (count != expect_count || sum != expect_sum) {
    failed("totals: got " + std::to_string(count) + " records (sum " + std::to_string(sum) +
           "), expected " + std::to_string(expect_count) + " (sum " + std::to_string(expect_sum) +
           ")");
  }
  std::printf("VERIFIED %" PRIu64 " records\n", count);
}

inline uint64_t expected_sum(uint32_t ranks, uint64_t n) {
  uint64_t sum = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    for (uint64_t i = 0; i < n; ++i) sum += mix(uint64_t{r} << 40 | i);
  }
  return sum;
}

// view_scenarios.cc: a rank killed from outside, the survivors in the next
// view (rebuild), and the killed rank back as its next incarnation (rejoin).
int rebuild(sluice::Cluster& c, const Args& a);
int rejoin(sluice::Cluster& c, const Args& a);
// soak_scenarios.cc: an ordered flow whose source idles (ordered-idle) and
// the soak's iteration (soak).
int ordered_idle(sluice::Cluster& c, const Args& a);
int soak(sluice::Cluster& c, const Args& a);

}  // namespace fault_worker
