#include "distributed_join.h"

#include <sluice/job.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "local_join.h"

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

// Waits at the start line; then rank 0's first worker says so: progress
// for the user, and the point a fault test's `sluice run --faults-after`
// waits for (no rank is told of a fault).
void start_together(StartLine& start, uint32_t rank, uint32_t slot, const char* algorithm) {
  start.wait();
  if (rank == 0 && slot == 0)
    std::fprintf(stderr, "sluice-join: %s join started on every rank\n", algorithm);
}

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

std::string describe(const std::string& what, Status s, const std::string& error) {
  return what + ": " + to_string(s) + (error.empty() ? "" : ": " + error);
}

// What a failed flow call says, as the exception a worker ends with: a
// PeerLostError when the call names a lost rank (run_workers reports it as
// the root cause before any echo of it), else a runtime_error.
std::exception_ptr failure(const Cluster&, const std::string& message,
                           std::optional<LostPeer> lost) {
  if (lost) return std::make_exception_ptr(PeerLostError(lost->rank, message));
  return std::make_exception_ptr(std::runtime_error(message));
}
template <class Handle>
std::exception_ptr failure(const Cluster& cluster, const std::string& what, Status s,
                           const Handle& h) {
  return failure(cluster, describe(what, s, h.error()), h.lost_peer());
}

// One worker thread's receiving end of a flow, as a Worker handler: hands
// each tuple to `take`, and accounts bytes and time (the wait before a batch
// is network time, handling it is `phase`).
template <class T, class Take>
auto batch_handler(Take& take, uint32_t my_rank, uint32_t threads_per_source_rank,
                   PhaseClock& clock, Phase phase, RankReport* stats) {
  return [&take, my_rank, threads_per_source_rank, &clock, phase, stats](std::span<const T> batch,
                                                                         const BatchInfo& info) {
    clock.lap(kNetworkPhase);
    for (const T& t : batch) take(t);
    const uint64_t bytes = batch.size_bytes();
    stats->bytes_in += bytes;
    if (info.source / threads_per_source_rank != my_rank) stats->bytes_remote += bytes;
    clock.lap(phase);
  };
}

// Runs the worker until every input ended; what failed if one did.
std::exception_ptr run_inputs(const Cluster& cluster, Worker& w, PhaseClock& clock,
                              const std::vector<std::string>& flows) {
  const Status s = w.run();
  clock.lap(kNetworkPhase);
  if (s == Status::kEndOfFlow) return nullptr;
  return failure(cluster,
                 describe("consuming flow " + flows[w.reported()], s, w.error(w.reported())),
                 w.lost_peer(w.reported()));
}

constexpr uint64_t kProgressEvery = 4096;

// ---------------------------------------------------------------- radix join

// The partitioning loop: each tuple to the worker that owns its partition.
// Flattened so that the flow's push fast path (a bounds check and a 16-byte
// copy into the target's ring) is inlined here; only a full ring leaves the
// loop, for `when_full(target, tuple)` (which drains and retries, or throws).
template <class T, class WhenFull>
[[gnu::flatten]] void push_rows(Source<T>& src, std::span<const T> rows, uint32_t workers,
                                WhenFull&& when_full, const JoinConfig& config, uint64_t& pushed) {
  const bool report = static_cast<bool>(config.on_progress);
  for (const T& t : rows) {
    const uint32_t target = network_partition(key_hash(t.key), workers);
    if (src.try_push_to(target, t) != Status::kOk) [[unlikely]]
      when_full(target, t);
    if (report && ++pushed % kProgressEvery == 0) [[unlikely]]
      config.on_progress(pushed);
  }
}

template <class T>
struct RadixShared {
  const Cluster* cluster = nullptr;
  ShuffleSpec<T> build_spec{""}, probe_spec{""};
  bool swapped = false;  // build side is S
  uint32_t fbits = 0;
  uint64_t build_share = 0, probe_share = 0;  // expected tuples per worker
};

// One worker thread of the radix join: sets up, waits at the start line,
// joins its share into *out. Throws what failed (its ends are then
// destroyed, so their peers learn at once that it is gone).
template <class T>
void radix_worker(const JoinConfig& config, const RadixShared<T>& sh, uint32_t my_rank,
                  uint32_t slot, uint32_t world, Source<T> build_out, Target<T> build_in,
                  Source<T> probe_out, Target<T> probe_in, std::span<const T> build_local,
                  std::span<const T> probe_local, StartLine& start, RankReport* out) {
  const uint32_t threads = config.threads;
  const uint32_t workers = world * threads;
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
  // Both flows are open at once: a worker pushes its probe tuples as soon as
  // its build tuples are out, whether or not the others' have arrived
  // (targets only partition probe tuples as they come; probing waits for the
  // end of both flows). Whenever a push or close has to wait, the Worker
  // takes what arrived on either flow, so no two workers ever wait on each
  // other with full rings, and parks on both when nothing moves.
  Worker w(IdleStrategy{0, 64});  // ranks outnumber cores here: never spin
  w.add(std::move(build_in),
        batch_handler<T>(take_build, my_rank, threads, clock, kBuildPhase, out));
  w.add(std::move(probe_in),
        batch_handler<T>(take_probe, my_rank, threads, clock, kProbePhase, out));
  const std::vector<std::string> flows = {sh.build_spec.spec().name(), sh.probe_spec.spec().name()};
  uint64_t pushed = 0;
  auto push_relation = [&](Source<T>& src, std::span<const T> rows, const char* what) {
    push_rows(
        src, rows, workers,
        [&](uint32_t target, const T& t) {
          clock.lap(kPartitionPhase);
          const Status s = w.push_to(src, target, t);
          clock.lap(kNetworkPhase);
          if (s != Status::kOk) std::rethrow_exception(failure(*sh.cluster, what, s, src));
        },
        config, pushed);
    clock.lap(kPartitionPhase);
    const Status s = w.close(src);
    clock.lap(kNetworkPhase);
    if (s != Status::kOk) std::rethrow_exception(failure(*sh.cluster, what, s, src));
  };

  start_together(start, my_rank, slot, "radix");
  clock.start();
  push_relation(build_out, build_local, "pushing the build relation");
  push_relation(probe_out, probe_local, "pushing the probe relation");
  // Ours are out; take the rest until both flows end (every source has
  // closed them): the only synchronisation there is.
  if (std::exception_ptr e = run_inputs(*sh.cluster, w, clock, flows)) std::rethrow_exception(e);
  clock.lap(kProbePhase);
  double build_seconds = 0;
  const JoinResult result =
      join_partitions<T, Clock>(build_parts, probe_parts, sh.swapped, table, &build_seconds);
  clock.lap(kProbePhase);
  clock.move(kProbePhase, kBuildPhase, build_seconds);
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
  const Cluster* cluster = nullptr;
  std::vector<ReplicateSpec<T>> specs;  // one per slot
  bool swapped = false;                 // the replicated (build) side is S
  uint32_t fbits = 0;
  uint64_t build_total = 0;
  std::vector<JoinTable<T>*> tables;  // per slot, valid after the barrier
  std::atomic<bool> failed{false};
};

// One worker thread of the fragment-and-replicate join (slot `slot`): sets
// up, waits at the start line, builds its table, meets its siblings at
// `built`, probes. Throws what failed, after meeting its siblings.
template <class T>
void replicate_worker(const JoinConfig& config, ReplicateShared<T>& sh, uint32_t slot,
                      uint32_t my_rank, std::vector<Source<T>> outs, Target<T> in,
                      std::span<const T> build_local, std::span<const T> probe_local,
                      StartLine& start, std::barrier<>& built, RankReport* out) {
  const uint32_t threads = config.threads;
  PhaseClock clock;
  const uint64_t fmask = (uint64_t{1} << sh.fbits) - 1;
  const uint64_t expected = sh.build_total / threads + sh.build_total / threads / 8 + 64;
  PartitionBuffers<T> parts(sh.fbits, expected);
  JoinTable<T> table(sh.fbits);
  table.reserve(expected);
  sh.tables[slot] = &table;
  auto take = [&](const T& t) { parts.add(t); };
  Worker w(IdleStrategy{0, 64});  // ranks outnumber cores here: never spin
  w.add(std::move(in), batch_handler<T>(take, my_rank, threads, clock, kBuildPhase, out));
  const std::vector<std::string> flows = {sh.specs[slot].spec().name()};
  JoinResult result;

  start_together(start, my_rank, slot, "replicate");
  clock.start();
  // Until `built` every failure is kept, not thrown: every sibling must
  // arrive there, failed or not, or the others would wait forever.
  std::exception_ptr failed;
  try {
    failed = [&]() -> std::exception_ptr {
      uint64_t pushed = 0;
      for (const T& t : build_local) {
        Source<T>& dst = outs[(key_hash(t.key) & fmask) % threads];
        if (dst.try_push(t) != Status::kOk) [[unlikely]] {
          clock.lap(kPartitionPhase);
          const Status s = w.push(dst, t);
          clock.lap(kNetworkPhase);
          if (s != Status::kOk)
            return failure(*sh.cluster, "replicating the build relation", s, dst);
        }
        if (config.on_progress && ++pushed % kProgressEvery == 0) config.on_progress(pushed);
      }
      clock.lap(kPartitionPhase);
      for (auto& o : outs) {
        const Status s = w.close(o);
        clock.lap(kNetworkPhase);
        if (s != Status::kOk) return failure(*sh.cluster, "closing a replicate flow", s, o);
      }
      if (std::exception_ptr e = run_inputs(*sh.cluster, w, clock, flows)) return e;
      table.build(parts);
      clock.lap(kBuildPhase);
      return nullptr;
    }();
  } catch (...) {
    failed = std::current_exception();
  }
  const bool ok = failed == nullptr;
  if (!ok) {
    sh.failed.store(true, std::memory_order_relaxed);
    // Give up our ends before waiting for the siblings: our targets' live
    // sources elsewhere, and our sources' targets, learn at once that this
    // worker is gone instead of waiting on it (which could wait forever).
    w = Worker();
    for (auto& o : outs) o.abort();
  }
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
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

template <class T>
RankReport run_join(Cluster& cluster, const JoinConfig& config,
                    const std::vector<std::span<const T>>& r_parts,
                    const std::vector<std::span<const T>>& s_parts, uint64_t r_total,
                    uint64_t s_total) {
  const uint32_t threads = config.threads;
  // The ranks taking part; `world` and `rank` are this join's, not the job's:
  // how many take part and this rank's place among them (flow endpoint
  // indexes count only them).
  std::vector<uint32_t> members = config.ranks;
  if (members.empty()) {
    for (uint32_t r = 0; r < cluster.world_size(); ++r) members.push_back(r);
  }
  const auto me = std::find(members.begin(), members.end(), cluster.rank());
  if (me == members.end() || !std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() ||
      members.back() >= cluster.world_size()) {
    std::string list;
    // (append: GCC 12 warns falsely on chains of string +)
    for (uint32_t r : members) list.append(list.empty() ? "" : ",").append(std::to_string(r));
    throw Error(ErrorCode::kInvalidArgument,
                "join: JoinConfig::ranks {" + list +
                    "} must be ascending job ranks, each once, and name rank " +
                    std::to_string(cluster.rank()) + " (which calls run_join)");
  }
  const bool every_rank = config.ranks.empty();
  const uint32_t world = static_cast<uint32_t>(members.size());
  const uint32_t rank = static_cast<uint32_t>(me - members.begin());
  const uint32_t workers = world * threads;
  // The flows' endpoints: (member, thread), member-major.
  const std::vector<Endpoint> endpoints =
      every_rank ? cluster.all_ranks(threads) : cluster.ranks(members, threads);
  const bool swapped = s_total < r_total;
  const auto& build_parts = swapped ? s_parts : r_parts;
  const auto& probe_parts = swapped ? r_parts : s_parts;
  std::vector<RankReport> per_thread(threads);

  // Once every worker is set up, all taking part start together; the
  // rank's time runs until its last worker ends. A barrier name serves one
  // member set: a subset's is named after it.
  PoolOptions pool{threads, "join-start", {}};
  if (!every_rank) {
    for (uint32_t r : members) pool.name.append("-").append(std::to_string(r));
    pool.members = cluster.ranks(members);
  }
  auto report_of = [&](const PoolReport& run) {
    RankReport report;
    report.seconds = run.seconds;
    report.cpu_seconds = run.cpu_seconds;
    for (const RankReport& r : per_thread) {
      report.result.add(r.result);
      report.phases.add(r.phases);
      report.bytes_in += r.bytes_in;
      report.bytes_remote += r.bytes_remote;
      report.arena_blocks_added += r.arena_blocks_added;
      report.fanout_bits = r.fanout_bits;
    }
    if (run.failure) report.error = run.failure->describe();
    return report;
  };

  if (config.algorithm == Algorithm::kRadix) {
    RadixShared<T> sh;
    sh.cluster = &cluster;
    sh.swapped = swapped;
    const uint64_t build_total = swapped ? s_total : r_total,
                   probe_total = swapped ? r_total : s_total;
    sh.build_share = build_total / workers;
    sh.probe_share = probe_total / workers;
    sh.fbits = choose_fanout_bits(sh.build_share, sizeof(T));
    auto make = [&](const char* name) {
      auto spec = shuffle<T>(name).sources(endpoints).targets(endpoints).explicit_targets();
      if (config.segment_bytes != 0) spec.segment_bytes(config.segment_bytes);
      if (config.ring_segments != 0) spec.ring_segments(config.ring_segments);
      return spec;
    };
    sh.build_spec = make(swapped ? "join-S" : "join-R");
    sh.probe_spec = make(swapped ? "join-R" : "join-S");
    // Destroyed when this returns, after run_workers joined every worker
    // (and with it every source and target of the two flows).
    const DeclaredFlow build_flow = cluster.declare(sh.build_spec);
    const DeclaredFlow probe_flow = cluster.declare(sh.probe_spec);
    return report_of(run_workers(cluster, pool, [&](uint32_t t, StartLine& start) {
      radix_worker<T>(config, sh, rank, t, world, cluster.source(sh.build_spec, t),
                      cluster.target(sh.build_spec, t), cluster.source(sh.probe_spec, t),
                      cluster.target(sh.probe_spec, t), build_parts[t], probe_parts[t], start,
                      &per_thread[t]);
    }));
  }

  ReplicateShared<T> sh;
  sh.cluster = &cluster;
  sh.swapped = swapped;
  sh.build_total = swapped ? s_total : r_total;
  // At least one sub-partition per thread, so that every thread builds a part.
  sh.fbits = std::max<uint32_t>(choose_fanout_bits(sh.build_total, sizeof(T)),
                                static_cast<uint32_t>(std::bit_width(threads - 1)));
  sh.tables.assign(threads, nullptr);
  std::vector<DeclaredFlow> bcast_flows;  // outlive the workers (joined by run_workers)
  for (uint32_t g = 0; g < threads; ++g) {
    std::vector<Endpoint> targets;
    for (uint32_t r = 0; r < world; ++r) targets.push_back(Endpoint{members[r], g});
    sh.specs.push_back(
        bcast_spec<T>("join-bcast-" + std::to_string(g), endpoints, targets, config));
    bcast_flows.push_back(cluster.declare(sh.specs.back()));
  }
  std::barrier<> built(threads);
  return report_of(run_workers(cluster, pool, [&](uint32_t t, StartLine& start) {
    std::vector<Source<T>> outs;
    for (uint32_t g = 0; g < threads; ++g) outs.push_back(cluster.source(sh.specs[g], t));
    replicate_worker<T>(config, sh, t, rank, std::move(outs), cluster.target(sh.specs[t], t),
                        build_parts[t], probe_parts[t], start, built, &per_thread[t]);
  }));
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
