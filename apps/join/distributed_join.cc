#include "distributed_join.h"

#include <atomic>
#include <barrier>
#include <bit>
#include <chrono>
#include <cstdio>
#include <latch>
#include <memory>
#include <thread>

#include "local_join.h"
#include "timing.h"

namespace sluice::join {

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRadix:
      return "radix";
    case Algorithm::kReplicate:
      return "replicate";
    case Algorithm::kAuto:
      return "auto";
  }
  return "?";
}

AlgorithmChoice choose_algorithm(Algorithm requested, uint64_t r_tuples, uint64_t s_tuples,
                                 uint32_t ranks) {
  char buf[320];
  const uint64_t small = std::min(r_tuples, s_tuples), large = std::max(r_tuples, s_tuples);
  const char* small_name = r_tuples <= s_tuples ? "R" : "S";
  // What each rank receives: the radix join brings 1/P of both relations to
  // every rank (and partitions all of it); fragment-and-replicate brings the
  // whole small relation to every rank and leaves the large one in place.
  const double radix_in = static_cast<double>(r_tuples + s_tuples) / ranks;
  const double replicate_in = static_cast<double>(small);
  if (requested != Algorithm::kAuto) {
    std::snprintf(buf, sizeof(buf),
                  "as requested; per rank it receives %.0f tuples (radix: (|R|+|S|)/P = %.0f, "
                  "replicate: |%s| = %.0f)",
                  requested == Algorithm::kRadix ? radix_in : replicate_in, radix_in, small_name,
                  replicate_in);
    return {requested, buf};
  }
  if (replicate_in < radix_in) {
    std::snprintf(buf, sizeof(buf),
                  "auto: replicate, because |%s| = %llu is %.1fx smaller than |R|+|S| over %u "
                  "ranks: each rank "
                  "receives %.0f tuples instead of %.0f, and the %llu-tuple side is never moved",
                  small_name, static_cast<unsigned long long>(small),
                  radix_in / std::max(replicate_in, 1.0), ranks, replicate_in, radix_in,
                  static_cast<unsigned long long>(large));
    return {Algorithm::kReplicate, buf};
  }
  std::snprintf(buf, sizeof(buf),
                "auto: radix, because replicating the smaller relation (|%s| = %llu) to every rank "
                "would bring "
                "each rank %.0f tuples, more than the %.0f a shuffle of both relations does",
                small_name, static_cast<unsigned long long>(small), replicate_in, radix_in);
  return {Algorithm::kRadix, buf};
}

namespace {

enum Phase { kPartitionPhase, kNetworkPhase, kBuildPhase, kProbePhase, kNumPhases };

// Charges wall time to phases: lap(p) gives everything since the last lap to p.
class PhaseClock {
 public:
  void start() { last_ = Clock::now(); }
  void lap(Phase p) {
    const auto now = Clock::now();
    acc_[p] += now - last_;
    last_ = now;
  }
  // Re-attributes `seconds` already charged to `from` to `to`.
  void move(Phase from, Phase to, double seconds) {
    const auto d =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    acc_[from] -= d;
    acc_[to] += d;
  }
  PhaseTimes times() const {
    auto s = [&](Phase p) { return std::chrono::duration<double>(acc_[p]).count(); };
    return PhaseTimes{s(kPartitionPhase), s(kNetworkPhase), s(kBuildPhase), s(kProbePhase)};
  }

 private:
  Clock::time_point last_;
  Clock::duration acc_[kNumPhases]{};
};

std::string describe(const char* what, Status s, const std::string& error) {
  return std::string(what) + ": " + to_string(s) + (error.empty() ? "" : ": " + error);
}

// One worker thread's receiving end of a flow: consumes batches, hands each
// tuple to `take`, and accounts bytes and time.
template <class T, class Take>
class Inbox {
 public:
  Inbox(Target<T> target, Take take, const char* flow, uint32_t my_rank,
        uint32_t threads_per_source_rank, PhaseClock* clock, Phase phase, RankReport* stats)
      : target_(std::move(target)),
        take_(std::move(take)),
        flow_(flow),
        my_rank_(my_rank),
        per_rank_(threads_per_source_rank),
        clock_(clock),
        phase_(phase),
        stats_(stats) {}

  // Takes every batch that is ready now. Returns the number taken, or -1 on
  // failure (error() says why).
  int drain_ready() {
    int n = 0;
    while (!ended_) {
      auto batch = target_.try_consume();
      if (!batch) {
        if (target_.status() == Status::kTimeout) return n;
        if (target_.status() == Status::kEndOfFlow) {
          ended_ = true;
          return n;
        }
        return fail();
      }
      clock_->lap(kNetworkPhase);
      process(*batch);
      ++n;
    }
    return n;
  }
  // Waits for batches until `deadline` (at most) or the end of the flow.
  // Returns false on failure.
  bool drain_until(Deadline deadline) {
    while (!ended_ && (deadline == kForever || Clock::now() < deadline)) {
      auto batch = target_.consume(deadline);
      clock_->lap(kNetworkPhase);
      if (!batch) {
        if (target_.status() == Status::kEndOfFlow)
          ended_ = true;
        else if (target_.status() == Status::kTimeout && deadline != kForever)
          return true;
        else
          return fail() == 0;
        continue;
      }
      process(*batch);
    }
    return true;
  }
  bool ended() const { return ended_; }
  const std::string& error() const { return error_; }

 private:
  void process(std::span<const T> batch) {
    for (const T& t : batch) take_(t);
    const uint64_t bytes = batch.size_bytes();
    stats_->bytes_in += bytes;
    if (target_.last_source() / per_rank_ != my_rank_) stats_->bytes_remote += bytes;
    clock_->lap(phase_);
  }
  int fail() {
    error_ = describe((std::string("consuming flow ") + flow_).c_str(), target_.status(),
                      target_.error());
    return -1;
  }

  Target<T> target_;
  Take take_;
  const char* flow_;
  uint32_t my_rank_;
  uint32_t per_rank_;
  PhaseClock* clock_;
  Phase phase_;
  RankReport* stats_;
  bool ended_ = false;
  std::string error_;
};

// Two inboxes drained as one (the radix join's build and probe flows, which
// are both open at once): waiting waits on the first that has not ended.
template <class A, class B>
class BothInboxes {
 public:
  BothInboxes(A& a, B& b) : a_(a), b_(b) {}
  int drain_ready() {
    const int x = a_.drain_ready();
    if (x < 0) return fail(a_);
    const int y = b_.drain_ready();
    if (y < 0) return fail(b_);
    return x + y;
  }
  bool drain_until(Deadline deadline) {
    if (!a_.ended()) return a_.drain_until(deadline) || fail(a_) == 0;
    return b_.drain_until(deadline) || fail(b_) == 0;
  }
  bool ended() const { return a_.ended() && b_.ended(); }
  const std::string& error() const { return error_; }

 private:
  template <class I>
  int fail(const I& i) {
    error_ = i.error();
    return -1;
  }
  A& a_;
  B& b_;
  std::string error_;
};

// Pushes with try_push/try_push_to on `out` and, while the target's ring is
// full, drains this worker's own inbox, so that no two workers ever wait on
// each other with full rings. `attempt()` makes one try and returns its
// status; `wait_and_push(deadline)` pushes, waiting for credit until the
// deadline (kTimeout then).
//
// With nothing to drain, the worker waits alternately for credit and for its
// inbox, in slices that double from 50 us to 2 ms: both waits park (the
// flow's spin-yield-futex), so a worker that waits long costs a few system
// calls, not a loop of sched_yield() that steals the CPU from the peer it
// waits for (2 vCPUs and more ranks than that are the normal case here).
constexpr auto kFirstWaitSlice = std::chrono::microseconds(50);
constexpr auto kLastWaitSlice = std::chrono::microseconds(2000);

template <class T, class Attempt, class WaitAndPush, class Drain>
[[gnu::noinline]] bool push_draining(Attempt&& attempt, WaitAndPush&& wait_and_push,
                                     const Source<T>& out, Drain& inbox, PhaseClock& clock,
                                     std::string* error, const char* what) {
  Status s = attempt();
  if (s == Status::kOk) [[likely]]
    return true;
  auto slice = std::chrono::duration_cast<Clock::duration>(kFirstWaitSlice);
  while (s == Status::kBackPressured || s == Status::kTimeout) {
    clock.lap(kPartitionPhase);
    const int got = inbox.drain_ready();
    if (got < 0) {
      *error = inbox.error();
      return false;
    }
    if (got > 0) {
      slice = std::chrono::duration_cast<Clock::duration>(kFirstWaitSlice);
      s = attempt();
      continue;
    }
    s = wait_and_push(Clock::now() + slice);
    clock.lap(kNetworkPhase);
    if (s != Status::kTimeout) break;
    if (!inbox.ended() && !inbox.drain_until(Clock::now() + slice)) {
      *error = inbox.error();
      return false;
    }
    slice = std::min<Clock::duration>(2 * slice, kLastWaitSlice);
    s = attempt();
  }
  if (s != Status::kOk) {
    *error = describe(what, s, out.error());
    return false;
  }
  return true;
}

// Closes `out`, draining the inbox while it waits.
//
// Two steps, because Source::close() is not safe to call again after it
// timed out while posting a segment with END over ofi (it has then marked
// that segment published without recording that the target has ended, and
// the next call publishes another END segment, on credit the target never
// returns: a livelock seen with 3 ranks x 2 threads over tcp;ofi_rxm). So:
// first flush() until every partial segment is posted (flush is safe to
// retry), then close() with a deadline long enough for the provider's queue
// to accept the END segment.
constexpr auto kCloseWait = std::chrono::milliseconds(200);

template <class T, class Drain>
bool close_draining(Source<T>& out, Drain& inbox, PhaseClock& clock, std::string* error,
                    const char* what) {
  // Between tries: take what has arrived, else wait for the inbox a little
  // (parked), longer each time (as in push_draining).
  auto slice = std::chrono::duration_cast<Clock::duration>(kFirstWaitSlice);
  auto wait_a_little = [&] {
    const int got = inbox.drain_ready();
    if (got < 0) return false;
    if (got > 0) {
      slice = std::chrono::duration_cast<Clock::duration>(kFirstWaitSlice);
      return true;
    }
    if (!inbox.ended() && !inbox.drain_until(Clock::now() + slice)) return false;
    slice = std::min<Clock::duration>(2 * slice, kLastWaitSlice);
    return true;
  };
  for (;;) {
    const Status s = out.flush(Clock::now() + slice);
    clock.lap(kNetworkPhase);
    if (s == Status::kOk) break;
    if (s != Status::kTimeout && s != Status::kBackPressured) {
      *error = describe(what, s, out.error());
      return false;
    }
    if (!wait_a_little()) {
      *error = inbox.error();
      return false;
    }
  }
  for (;;) {
    const int got = inbox.drain_ready();
    if (got < 0) {
      *error = inbox.error();
      return false;
    }
    const Status s = out.close(Clock::now() + kCloseWait);
    clock.lap(kNetworkPhase);
    if (s == Status::kOk) return true;
    if (s != Status::kTimeout) {
      *error = describe(what, s, out.error());
      return false;
    }
    if (!wait_a_little()) {
      *error = inbox.error();
      return false;
    }
  }
}

constexpr uint64_t kProgressEvery = 4096;

// ---------------------------------------------------------------- radix join

// The partitioning loop: each tuple to the worker that owns its partition.
// Flattened so that the flow's push fast path (a bounds check and a 16-byte
// copy into the target's ring) is inlined here; only a full ring leaves the
// loop, for `when_full(target, tuple)` (which drains and retries).
template <class T, class WhenFull>
[[gnu::flatten]] bool push_rows(Source<T>& src, std::span<const T> rows, uint32_t workers,
                                WhenFull&& when_full, const JoinConfig& config, uint64_t& pushed) {
  const bool report = static_cast<bool>(config.on_progress);
  for (const T& t : rows) {
    const uint32_t target = network_partition(key_hash(t.key), workers);
    if (src.try_push_to(target, t) != Status::kOk) [[unlikely]] {
      if (!when_full(target, t)) return false;
    }
    if (report && ++pushed % kProgressEvery == 0) [[unlikely]]
      config.on_progress(pushed);
  }
  return true;
}

template <class T>
struct RadixShared {
  ShuffleSpec<T> build_spec{""}, probe_spec{""};
  bool swapped = false;  // build side is S
  uint32_t fbits = 0;
  uint64_t build_share = 0, probe_share = 0;  // expected tuples per worker
};

template <class T>
void radix_worker(const JoinConfig& config, const RadixShared<T>& sh, uint32_t my_rank,
                  uint32_t world, Source<T> build_out, Target<T> build_in, Source<T> probe_out,
                  Target<T> probe_in, std::span<const T> build_local,
                  std::span<const T> probe_local, std::latch& ready, std::latch& go,
                  RankReport* out) {
  const uint32_t threads = config.threads;
  const uint32_t workers = world * threads;
  std::string& error = out->error;
  PhaseClock clock;
  // Setup, not timed: buffers sized from the expected share (with room for
  // imbalance; skew beyond that takes extra arena blocks, never per tuple),
  // and one scratch table, rebuilt per sub-partition just before it is
  // probed.
  PartitionBuffers<T> build_parts(sh.fbits, sh.build_share + sh.build_share / 8 + 64);
  PartitionBuffers<T> probe_parts(sh.fbits, sh.probe_share + sh.probe_share / 8 + 64);
  JoinTable<T> table(sh.fbits);
  table.reserve(largest_partition_estimate(sh.build_share, sh.fbits));
  auto take_build = [&](const T& t) { build_parts.add(t); };
  auto take_probe = [&](const T& t) { probe_parts.add(t); };
  Inbox build_inbox(std::move(build_in), take_build, sh.build_spec.spec().name.c_str(), my_rank,
                    threads, &clock, kBuildPhase, out);
  Inbox probe_inbox(std::move(probe_in), take_probe, sh.probe_spec.spec().name.c_str(), my_rank,
                    threads, &clock, kProbePhase, out);
  // Both flows are open at once: a worker pushes its probe tuples as soon as
  // its build tuples are out, whether or not the others' have arrived
  // (targets only partition probe tuples as they come; probing waits for the
  // end of both flows), and drains both inboxes whenever it has to wait.
  BothInboxes inboxes(build_inbox, probe_inbox);
  uint64_t pushed = 0;
  auto push_relation = [&](Source<T>& src, std::span<const T> rows, const char* what) {
    if (!push_rows(
            src, rows, workers,
            [&](uint32_t target, const T& t) {
              return push_draining<T>([&] { return src.try_push_to(target, t); },
                                      [&](Deadline d) { return src.push_to(target, t, d); }, src,
                                      inboxes, clock, &error, what);
            },
            config, pushed)) {
      return false;
    }
    clock.lap(kPartitionPhase);
    return close_draining(src, inboxes, clock, &error, what);
  };

  ready.count_down();
  go.wait();
  clock.start();
  JoinResult result;
  // On failure `error` says why; the result is then not reported.
  [&] {
    if (!push_relation(build_out, build_local, "pushing the build relation")) return false;
    if (!push_relation(probe_out, probe_local, "pushing the probe relation")) return false;
    // Ours are out; take the rest until both flows end (every source has
    // closed them): the only synchronisation there is.
    if (!build_inbox.drain_until(kForever)) {
      error = build_inbox.error();
      return false;
    }
    if (!probe_inbox.drain_until(kForever)) {
      error = probe_inbox.error();
      return false;
    }
    clock.lap(kProbePhase);
    double build_seconds = 0;
    result = join_partitions<T, Clock>(build_parts, probe_parts, sh.swapped, table, &build_seconds);
    clock.lap(kProbePhase);
    clock.move(kProbePhase, kBuildPhase, build_seconds);
    return true;
  }();
  out->result = result;
  out->phases = clock.times();
  out->arena_blocks_added = build_parts.arena_blocks_added() + probe_parts.arena_blocks_added();
  out->fanout_bits = sh.fbits;
}

// ------------------------------------------------- fragment-and-replicate join

// Flow g carries the small relation's tuples of the sub-partitions that
// slot g owns, from every worker to slot g of every rank.
template <class T>
ReplicateSpec<T> bcast_spec(const std::string& name, std::vector<Endpoint> sources,
                            std::vector<Endpoint> targets, const JoinConfig& config) {
  auto spec = replicate<T>(name).sources(std::move(sources)).targets(std::move(targets));
  if (config.segment_bytes != 0) spec.segment_bytes(config.segment_bytes);
  if (config.ring_segments != 0) spec.ring_segments(config.ring_segments);
  return spec;
}

template <class T>
struct ReplicateShared {
  std::vector<ReplicateSpec<T>> specs;  // one per slot
  bool swapped = false;                 // the replicated (build) side is S
  uint32_t fbits = 0;
  uint64_t build_total = 0;
  std::vector<JoinTable<T>*> tables;  // per slot, valid after the barrier
  std::atomic<bool> failed{false};
};

template <class T>
void replicate_worker(const JoinConfig& config, ReplicateShared<T>& sh, uint32_t slot,
                      uint32_t my_rank, std::vector<Source<T>> outs, Target<T> in,
                      std::span<const T> build_local, std::span<const T> probe_local,
                      std::latch& ready, std::latch& go, std::barrier<>& built, RankReport* out) {
  const uint32_t threads = config.threads;
  std::string& error = out->error;
  PhaseClock clock;
  const uint64_t fmask = (uint64_t{1} << sh.fbits) - 1;
  const uint64_t expected = sh.build_total / threads + sh.build_total / threads / 8 + 64;
  PartitionBuffers<T> parts(sh.fbits, expected);
  JoinTable<T> table(sh.fbits);
  table.reserve(expected);
  sh.tables[slot] = &table;
  auto take = [&](const T& t) { parts.add(t); };
  Inbox inbox(std::move(in), take, sh.specs[slot].spec().name.c_str(), my_rank, threads, &clock,
              kBuildPhase, out);
  JoinResult result;

  ready.count_down();
  go.wait();
  clock.start();
  bool ok = [&] {
    uint64_t pushed = 0;
    for (const T& t : build_local) {
      Source<T>& dst = outs[(key_hash(t.key) & fmask) % threads];
      if (!push_draining<T>([&] { return dst.try_push(t); },
                            [&](Deadline d) { return dst.push(t, d); }, dst, inbox, clock, &error,
                            "replicating the build relation")) {
        return false;
      }
      if (config.on_progress && ++pushed % kProgressEvery == 0) config.on_progress(pushed);
    }
    clock.lap(kPartitionPhase);
    for (auto& o : outs) {
      if (!close_draining(o, inbox, clock, &error, "closing a replicate flow")) return false;
    }
    if (!inbox.drain_until(kForever)) {
      error = inbox.error();
      return false;
    }
    table.build(parts);
    clock.lap(kBuildPhase);
    return true;
  }();
  if (!ok) sh.failed.store(true, std::memory_order_relaxed);
  // Every thread of this rank arrives, failed or not, so none waits forever.
  built.arrive_and_wait();
  clock.lap(kNetworkPhase);
  if (ok && !sh.failed.load(std::memory_order_relaxed)) {
    auto owner = [&](uint64_t h) { return sh.tables[(h & fmask) % threads]; };
    if (sh.swapped)
      probe_many<true>(probe_local, owner, result);
    else
      probe_many<false>(probe_local, owner, result);
    clock.lap(kProbePhase);
  }
  out->result = result;
  out->phases = clock.times();
  out->arena_blocks_added = parts.arena_blocks_added();
  out->fanout_bits = sh.fbits;
  // The tables stay alive until every sibling has probed them.
  built.arrive_and_wait();
}

}  // namespace

template <class T>
RankReport run_join(Cluster& cluster, const JoinConfig& config,
                    const std::vector<std::span<const T>>& r_parts,
                    const std::vector<std::span<const T>>& s_parts, uint64_t r_total,
                    uint64_t s_total) {
  const uint32_t threads = config.threads;
  const uint32_t world = cluster.world_size();
  const uint32_t rank = cluster.rank();
  const uint32_t workers = world * threads;
  const bool swapped = s_total < r_total;
  const auto& build_parts = swapped ? s_parts : r_parts;
  const auto& probe_parts = swapped ? r_parts : s_parts;
  std::vector<RankReport> per_thread(threads);
  std::vector<std::thread> pool;
  std::latch ready(threads), go(1);
  RankReport report;

  // Once every worker is set up, all ranks start together; the rank's time
  // runs until its last worker ends.
  auto start_and_wait = [&] {
    ready.wait();
    cluster.barrier("join-start");
    const double cpu0 = cpu_seconds();
    const auto start = Clock::now();
    go.count_down();
    for (auto& t : pool) t.join();
    report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    report.cpu_seconds = cpu_seconds() - cpu0;
    for (const RankReport& r : per_thread) {
      report.result.add(r.result);
      report.phases.add(r.phases);
      report.bytes_in += r.bytes_in;
      report.bytes_remote += r.bytes_remote;
      report.arena_blocks_added += r.arena_blocks_added;
      report.fanout_bits = r.fanout_bits;
      // Several threads may fail, some only because a sibling's failure
      // ended its flows: report the one that names a dead peer if any.
      const auto root_cause = [](const std::string& e) {
        return e.find("died") != std::string::npos || e.find("heartbeat") != std::string::npos;
      };
      if (!r.error.empty() &&
          (report.error.empty() || (root_cause(r.error) && !root_cause(report.error)))) {
        report.error = r.error;
      }
    }
  };

  if (config.algorithm == Algorithm::kRadix) {
    RadixShared<T> sh;
    sh.swapped = swapped;
    const uint64_t build_total = swapped ? s_total : r_total,
                   probe_total = swapped ? r_total : s_total;
    sh.build_share = build_total / workers;
    sh.probe_share = probe_total / workers;
    sh.fbits = choose_fanout_bits(sh.build_share, sizeof(T));
    auto make = [&](const char* name) {
      auto spec = shuffle<T>(name)
                      .sources(cluster.all_ranks(threads))
                      .targets(cluster.all_ranks(threads))
                      .explicit_targets();
      if (config.segment_bytes != 0) spec.segment_bytes(config.segment_bytes);
      if (config.ring_segments != 0) spec.ring_segments(config.ring_segments);
      return spec;
    };
    sh.build_spec = make(swapped ? "join-S" : "join-R");
    sh.probe_spec = make(swapped ? "join-R" : "join-S");
    cluster.declare(sh.build_spec);
    cluster.declare(sh.probe_spec);
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back(radix_worker<T>, std::cref(config), std::cref(sh), rank, world,
                        cluster.source(sh.build_spec, t), cluster.target(sh.build_spec, t),
                        cluster.source(sh.probe_spec, t), cluster.target(sh.probe_spec, t),
                        build_parts[t], probe_parts[t], std::ref(ready), std::ref(go),
                        &per_thread[t]);
    }
    start_and_wait();
    return report;
  }

  ReplicateShared<T> sh;
  sh.swapped = swapped;
  sh.build_total = swapped ? s_total : r_total;
  // At least one sub-partition per thread, so that every thread builds a part.
  sh.fbits = std::max<uint32_t>(choose_fanout_bits(sh.build_total, sizeof(T)),
                                static_cast<uint32_t>(std::bit_width(threads - 1)));
  sh.tables.assign(threads, nullptr);
  for (uint32_t g = 0; g < threads; ++g) {
    std::vector<Endpoint> targets;
    for (uint32_t r = 0; r < world; ++r) targets.push_back(Endpoint{r, g});
    sh.specs.push_back(bcast_spec<T>("join-bcast-" + std::to_string(g), cluster.all_ranks(threads),
                                     targets, config));
    cluster.declare(sh.specs.back());
  }
  std::barrier<> built(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    std::vector<Source<T>> outs;
    for (uint32_t g = 0; g < threads; ++g) outs.push_back(cluster.source(sh.specs[g], t));
    pool.emplace_back(replicate_worker<T>, std::cref(config), std::ref(sh), t, rank,
                      std::move(outs), cluster.target(sh.specs[t], t), build_parts[t],
                      probe_parts[t], std::ref(ready), std::ref(go), std::ref(built),
                      &per_thread[t]);
  }
  start_and_wait();
  return report;
}

template RankReport run_join<Tuple8>(Cluster&, const JoinConfig&,
                                     const std::vector<std::span<const Tuple8>>&,
                                     const std::vector<std::span<const Tuple8>>&, uint64_t,
                                     uint64_t);
template RankReport run_join<Tuple16>(Cluster&, const JoinConfig&,
                                      const std::vector<std::span<const Tuple16>>&,
                                      const std::vector<std::span<const Tuple16>>&, uint64_t,
                                      uint64_t);

}  // namespace sluice::join
