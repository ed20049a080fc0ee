// The main demo: an N:M shuffle of 16-byte tuples between every thread of
// every rank, verified exactly-once. Run it through the launcher:
//
//   sluice run -n 4 -- sluice-shuffle-demo --threads 2 --tuples 100000000
//
// Every thread is both a source and a target endpoint. It pushes its share of
// tuples (routed by a hash of the key) and, whenever a ring is full, drains
// what has arrived for it, so no thread ever waits on itself. Afterwards the
// ranks compare, per target, the count and an order-independent checksum of
// what the sources sent against what the target received, and each target
// checks that every source's tuples arrived in the order they were pushed.
#include <sluice/sluice.h>
#include <sys/resource.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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
};

struct Options {
  uint32_t threads = 2;
  uint64_t tuples = 100'000'000;
  uint32_t segment_bytes = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "sluice-shuffle-demo: %s\n"
      "usage: sluice run -n RANKS -- sluice-shuffle-demo [--threads T] [--tuples N] "
      "[--segment-bytes B]\n"
      "  --threads T        worker threads per rank, each a source and a target (default 2)\n"
      "  --tuples N         tuples in the whole job (default 100000000)\n"
      "  --segment-bytes B  segment payload (default 8192)\n",
      why);
  std::exit(2);
}

uint64_t parse_number(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage((std::string(flag) + " needs a whole number, not '" + text + "'").c_str());
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("a verified N:M shuffle over sluice flows");
    if (i + 1 >= argc) usage((a + " needs a value").c_str());
    if (a == "--threads")
      o.threads = static_cast<uint32_t>(parse_number("--threads", argv[++i]));
    else if (a == "--tuples")
      o.tuples = parse_number("--tuples", argv[++i]);
    else if (a == "--segment-bytes")
      o.segment_bytes = static_cast<uint32_t>(parse_number("--segment-bytes", argv[++i]));
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.threads == 0 || o.threads > 64) usage("--threads must be in [1, 64]");
  return o;
}

// What one worker thread saw.
struct WorkerResult {
  std::vector<Tally> sent;  // per target index
  Tally received;
  uint64_t order_violations = 0;
  std::string error;
};

void worker(sluice::Cluster& cluster, const sluice::ShuffleSpec<Tuple>& spec, uint32_t slot,
            uint64_t first, uint64_t count, WorkerResult* result) {
  auto out = cluster.source(spec, slot);
  const uint32_t threads = static_cast<uint32_t>(spec.spec().sources.size() / cluster.world_size());
  const uint32_t source_index = cluster.rank() * threads + slot;  // all_ranks() is rank-major
  result->sent.assign(out.num_targets(), Tally{});
  std::vector<uint64_t> next_seq(spec.spec().sources.size(), 0);

  // This thread sends and receives: its Worker consumes whenever a push or
  // close would wait (a peer may be waiting for us to make room).
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

  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t seq = first + i;
    Tuple t{sluice::hash64(seq * 0x100000001b3ULL + source_index),
            uint64_t{source_index} << kSeqBits | i};
    const uint32_t target = out.target_of(t);
    if (w.push_to(out, target, t) != sluice::Status::kOk) {
      result->error = out.error();
      return;
    }
    result->sent[target].add(t);
  }
  if (w.close(out) != sluice::Status::kOk) {
    result->error = out.error();
    return;
  }
  if (w.run() != sluice::Status::kEndOfFlow) result->error = w.error(0);
}

std::string encode(const std::vector<uint64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}
std::vector<uint64_t> decode(const std::string& s) {
  std::vector<uint64_t> v(s.size() / 8);
  std::memcpy(v.data(), s.data(), v.size() * 8);
  return v;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// What rank 0's flows to the other ranks run over: "shm", "ofi", or
// "shm+ofi" where some ranks share its host and others do not.
std::string transport_label(const sluice::Cluster& cluster) {
  bool shm = false, ofi = false;
  for (uint32_t r = 0; r < cluster.world_size(); ++r) {
    if (r == cluster.rank() && cluster.world_size() > 1) continue;
    (cluster.transport_to(r) == sluice::Transport::kOfi ? ofi : shm) = true;
  }
  return shm && ofi ? "shm+ofi" : ofi ? "ofi" : "shm";
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    auto cluster = sluice::Cluster::join();
    const uint32_t world = cluster.world_size();
    auto spec = sluice::shuffle<Tuple>("demo")
                    .sources(cluster.all_ranks(opt.threads))
                    .targets(cluster.all_ranks(opt.threads))
                    .key(&Tuple::key);
    if (opt.segment_bytes != 0) spec.segment_bytes(opt.segment_bytes);
    auto flow = cluster.declare(spec);

    const uint64_t sources = uint64_t{world} * opt.threads;
    std::vector<WorkerResult> results(opt.threads);
    cluster.barrier("demo-start");
    const auto start = sluice::Clock::now();
    const double cpu0 = cpu_seconds();
    std::vector<std::thread> threads;
    for (uint32_t slot = 0; slot < opt.threads; ++slot) {
      const uint64_t index = uint64_t{cluster.rank()} * opt.threads + slot;
      const uint64_t share = opt.tuples / sources + (index < opt.tuples % sources ? 1 : 0);
      threads.emplace_back(worker, std::ref(cluster), std::cref(spec), slot, uint64_t{0}, share,
                           &results[slot]);
    }
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(sluice::Clock::now() - start).count();
    const double cpu = cpu_seconds() - cpu0;

    bool ok = true;
    for (uint32_t slot = 0; slot < opt.threads; ++slot) {
      if (!results[slot].error.empty()) {
        std::fprintf(stderr, "slot %u failed: %s\n", slot, results[slot].error.c_str());
        ok = false;
      }
    }
    // Per target: what all sources sent it, against what it received.
    std::vector<uint64_t> sent(sources * 2, 0);
    for (const auto& r : results) {
      for (size_t t = 0; t < r.sent.size(); ++t) {
        sent[2 * t] += r.sent[t].count;
        sent[2 * t + 1] += r.sent[t].sum;
      }
    }
    auto all_sent = cluster.allgather("demo-sent", encode(sent));
    std::vector<uint64_t> expected(sources * 2, 0);
    for (const auto& s : all_sent) {
      auto v = decode(s);
      for (size_t i = 0; i < v.size() && i < expected.size(); ++i) expected[i] += v[i];
    }
    uint64_t received = 0;
    for (uint32_t slot = 0; slot < opt.threads; ++slot) {
      const uint64_t t = uint64_t{cluster.rank()} * opt.threads + slot;
      const Tally& got = results[slot].received;
      received += got.count;
      if (got.count != expected[2 * t] || got.sum != expected[2 * t + 1]) {
        std::fprintf(stderr,
                     "target (%u,%u): received %" PRIu64 " tuples (checksum %016" PRIx64
                     "), sources sent %" PRIu64 " (checksum %016" PRIx64 ")\n",
                     cluster.rank(), slot, got.count, got.sum, expected[2 * t],
                     expected[2 * t + 1]);
        ok = false;
      }
      if (results[slot].order_violations != 0) {
        std::fprintf(stderr,
                     "target (%u,%u): %" PRIu64 " tuples arrived out of their source's order\n",
                     cluster.rank(), slot, results[slot].order_violations);
        ok = false;
      }
    }
    std::vector<uint64_t> mine = {ok ? 1u : 0u, received, static_cast<uint64_t>(seconds * 1e9),
                                  static_cast<uint64_t>(cpu * 1e9)};
    auto all = cluster.allgather("demo-result", encode(mine));
    if (cluster.rank() == 0) {
      bool all_ok = true;
      uint64_t total = 0;
      double max_seconds = 0, total_cpu = 0;
      for (const auto& s : all) {
        auto v = decode(s);
        all_ok &= v[0] == 1;
        total += v[1];
        max_seconds = std::max(max_seconds, v[2] / 1e9);
        total_cpu += v[3] / 1e9;
      }
      const double bytes = static_cast<double>(total) * sizeof(Tuple);
      std::printf(
          "sluice shuffle demo: %u ranks x %u threads, N:M shuffle of %zu-byte tuples over %s\n",
          world, opt.threads, sizeof(Tuple), transport_label(cluster).c_str());
      std::printf("  tuples    %" PRIu64 "\n", total);
      std::printf("  bytes     %.3f GB\n", bytes / 1e9);
      std::printf("  seconds   %.3f (slowest rank; %.2f CPU-seconds in all)\n", max_seconds,
                  total_cpu);
      std::printf("  tuples/s  %.1f M\n", total / max_seconds / 1e6);
      std::printf("  GB/s      %.2f\n", bytes / max_seconds / 1e9);
      if (all_ok && total == opt.tuples) {
        std::printf(
            "  verified: every tuple delivered exactly once (per-target counts and checksums, "
            "per-source order)\n");
      } else {
        std::printf("  NOT verified: %" PRIu64 " of %" PRIu64
                    " tuples accounted for; see the errors above\n",
                    total, opt.tuples);
      }
      std::fflush(stdout);
      return all_ok && total == opt.tuples ? 0 : 1;
    }
    return ok ? 0 : 1;
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "sluice-shuffle-demo: %s\n", e.what());
    return 1;
  }
}
