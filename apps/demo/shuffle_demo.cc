// The shuffle demo (make demo-shuffle): an N:M shuffle of 16-byte tuples
// between every thread of every rank, verified exactly-once. Run it through
// the launcher:
//
//   sluice run -n 4 -- sluice-shuffle-demo --threads 2 --tuples 100000000
//
// Every thread is both a source and a target endpoint. It pushes its share of
// tuples (routed by a hash of the key) and, whenever a ring is full, drains
// what has arrived for it, so no thread ever waits on itself. Each target
// checks that every source's tuples arrived in the order they were pushed.
// Afterwards rank 0 gathers every rank's tallies and compares, per target,
// the count and an order-independent checksum of what the sources sent
// against what the target received, and prints the summary.
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "options.h"

namespace {

struct Tuple {
  uint64_t key;
  uint64_t value;  // source index << 40 | sequence number within the source
};
static_assert(sizeof(Tuple) == 16);

constexpr int kSeqBits = 40;

uint64_t fingerprint(const Tuple& t) {
  return sluice::hash64(t.key ^ sluice::hash64(t.value + 0x9e3779b97f4a7c15ULL));
}

struct Tally {
  uint64_t count = 0;
  uint64_t sum = 0;
  void add(const Tuple& t) {
    ++count;
    sum += fingerprint(t);
  }
  void add(const Tally& o) {
    count += o.count;
    sum += o.sum;
  }
};

// What one worker thread saw.
struct WorkerResult {
  std::vector<Tally> sent;  // per target index
  Tally received;
  uint64_t order_violations = 0;
};

// What a rank reports to rank 0 besides its tallies.
struct Report {
  double seconds, cpu_seconds;
};

// Throws what a failed call says: a PeerLostError when it names a lost rank
// (run_workers reports that rank as the root cause).
[[noreturn]] void fail(const char* what, sluice::Status s, const std::string& error,
                       const std::optional<sluice::LostPeer>& lost) {
  const std::string message = std::string(what) + ": " + sluice::to_string(s) + ": " + error;
  if (lost) throw sluice::PeerLostError(lost->rank, message);
  throw std::runtime_error(message);
}

// One worker thread: source and target endpoint (rank, slot) of the flow.
// It pushes `count` tuples and, whenever a push or close would wait, takes
// what arrived for it (a peer may be waiting for us to make room).
void worker(sluice::Cluster& cluster, const sluice::ShuffleSpec<Tuple>& spec, uint32_t slot,
            uint32_t threads, uint64_t count, sluice::StartLine& start, WorkerResult* result) {
  auto out = cluster.source(spec, slot);
  const uint32_t source_index = cluster.rank() * threads + slot;  // all_ranks() is rank-major
  result->sent.assign(out.num_targets(), Tally{});
  std::vector<uint64_t> next_seq(spec.spec().sources().size(), 0);
  sluice::Worker w;
  w.add(cluster.target(spec, slot), [&](std::span<const Tuple> batch) {
    for (const Tuple& t : batch) {
      result->received.add(t);
      const uint64_t src = t.value >> kSeqBits;
      const uint64_t seq = t.value & ((uint64_t{1} << kSeqBits) - 1);
      if (src >= next_seq.size() || seq < next_seq[src])
        ++result->order_violations;
      else
        next_seq[src] = seq + 1;
    }
  });

  start.wait();
  for (uint64_t i = 0; i < count; ++i) {
    Tuple t{sluice::hash64(i * 0x100000001b3ULL + source_index),
            uint64_t{source_index} << kSeqBits | i};
    const uint32_t target = out.target_of(t);
    if (sluice::Status s = w.push_to(out, target, t); s != sluice::Status::kOk)
      fail("push", s, out.error(), out.lost_peer());
    result->sent[target].add(t);
  }
  if (sluice::Status s = w.close(out); s != sluice::Status::kOk)
    fail("close", s, out.error(), out.lost_peer());
  if (sluice::Status s = w.run(); s != sluice::Status::kEndOfFlow) {
    fail("consume", s, w.error(w.reported()), w.lost_peer(w.reported()));
  }
}

std::string bytes_of(const std::vector<Tally>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(Tally));
}

std::vector<Tally> tallies_of(const std::string& s) {
  std::vector<Tally> v(s.size() / sizeof(Tally));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(Tally));
  return v;
}

int run(sluice::JobContext& ctx, const sluice::demo::Options& opt) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t world = ctx.world_size(), threads = ctx.flags().threads;
  auto spec = sluice::shuffle<Tuple>("demo")
                  .sources(cluster.all_ranks(threads))
                  .targets(cluster.all_ranks(threads))
                  .key(&Tuple::key);
  if (opt.segment_bytes != 0) spec.segment_bytes(opt.segment_bytes);
  auto flow = cluster.declare(spec);

  const uint64_t sources = uint64_t{world} * threads;
  std::vector<WorkerResult> results(threads);
  const sluice::PoolReport run = ctx.run_workers(
      [&](uint32_t slot, sluice::StartLine& start) {
        const uint64_t index = uint64_t{ctx.rank()} * threads + slot;
        const uint64_t share = opt.tuples / sources + (index < opt.tuples % sources ? 1 : 0);
        worker(cluster, spec, slot, threads, share, start, &results[slot]);
      },
      "demo-start");
  if (run.failure) return ctx.fail(*run.failure);

  // To rank 0: per target of the job, what this rank's sources sent it; then
  // per target of this rank, what it received; then per target of this rank
  // the tuples that arrived out of their source's order (as counts).
  std::vector<Tally> tallies(sources + 2 * threads);
  for (uint32_t slot = 0; slot < threads; ++slot) {
    const WorkerResult& r = results[slot];
    for (size_t t = 0; t < r.sent.size(); ++t) tallies[t].add(r.sent[t]);
    tallies[sources + slot] = r.received;
    tallies[sources + threads + slot].count = r.order_violations;
  }
  const std::vector<std::string> all_tallies = ctx.gather_bytes("demo-tallies", bytes_of(tallies));
  const std::vector<Report> reports =
      ctx.gather("demo-report", Report{run.seconds, run.cpu_seconds});
  if (ctx.rank() != 0) return 0;

  std::vector<std::vector<Tally>> of_rank;
  for (const std::string& s : all_tallies) of_rank.push_back(tallies_of(s));
  bool ok = true;
  uint64_t total = 0;
  for (uint64_t t = 0; t < sources; ++t) {
    const uint32_t rank = static_cast<uint32_t>(t / threads),
                   slot = static_cast<uint32_t>(t % threads);
    Tally sent;
    for (const auto& v : of_rank) sent.add(v[t]);
    const Tally& got = of_rank[rank][sources + slot];
    total += got.count;
    if (got.count != sent.count || got.sum != sent.sum) {
      std::fprintf(stderr,
                   "target (%u,%u): received %" PRIu64 " tuples (checksum %016" PRIx64
                   "), sources sent %" PRIu64 " (checksum %016" PRIx64 ")\n",
                   rank, slot, got.count, got.sum, sent.count, sent.sum);
      ok = false;
    }
    if (const uint64_t late = of_rank[rank][sources + threads + slot].count; late != 0) {
      std::fprintf(stderr,
                   "target (%u,%u): %" PRIu64 " tuples arrived out of their source's order\n", rank,
                   slot, late);
      ok = false;
    }
  }
  double max_seconds = 0, total_cpu = 0;
  for (const Report& r : reports) {
    max_seconds = std::max(max_seconds, r.seconds);
    total_cpu += r.cpu_seconds;
  }
  const double bytes = static_cast<double>(total) * sizeof(Tuple);
  std::printf(
      "sluice shuffle demo: %u ranks x %u threads, N:M shuffle of %zu-byte tuples over %s\n", world,
      threads, sizeof(Tuple), ctx.transport_label().c_str());
  std::printf("  tuples    %" PRIu64 "\n", total);
  std::printf("  bytes     %.3f GB\n", bytes / 1e9);
  std::printf("  seconds   %.3f (slowest rank; %.2f CPU-seconds in all)\n", max_seconds, total_cpu);
  std::printf("  tuples/s  %.1f M\n", total / max_seconds / 1e6);
  std::printf("  GB/s      %.2f\n", bytes / max_seconds / 1e9);
  if (ok && total == opt.tuples) {
    std::printf(
        "  verified: every tuple delivered exactly once (per-target counts and checksums, "
        "per-source order)\n");
    return 0;
  }
  std::printf("  NOT verified: %" PRIu64 " of %" PRIu64
              " tuples accounted for; see the errors above\n",
              total, opt.tuples);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job("sluice-shuffle-demo",
                  "A verified N:M shuffle of 16-byte tuples between every thread of every rank",
                  sluice::kFlagThreads | sluice::kFlagCluster);
  job.flags().threads = 2;
  sluice::demo::Options opt;
  sluice::demo::add_options(job.cli(), opt);
  return job.main(argc, argv, [&](sluice::JobContext& ctx) { return run(ctx, opt); });
}
