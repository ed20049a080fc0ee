// The program tests/replicate/ runs through `sluice run`: replicate flows
// (ordered or not), a source that dies after taking a sequence number,
// one-sided memory regions, and barriers on endpoint sets. Every rank is a
// source (slot 0) and a target (slot 1). Targets print one RESULT line each;
// the test compares them across ranks.
#include <sluice/sluice.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/job_args.h"

namespace {

struct Rec {
  uint32_t source;
  uint32_t pad;
  uint64_t seq;
  uint64_t value;
};

uint64_t fingerprint(const Rec& r) {
  return sluice::hash64(r.value ^ (uint64_t{r.source} << 48) ^ r.seq);
}

struct Args {
  std::string mode = "replicate";
  bool ordered = false;
  bool latency = false;
  uint64_t tuples = 100000;
  int64_t die_rank = -1;
  uint64_t die_after = 0;
  uint64_t ops = 1000;
  uint64_t rounds = 1000;
  uint64_t gap_ms = 3000;
  uint64_t flush_every = 97;  // records between a source's flushes; 0: never
  int signal = 0;
  int64_t late_rank = -1;  // this rank's target starts consuming late_ms late
  uint64_t late_ms = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  sluice::testing::JobArgs(argc, argv)
      .value("--mode", &a.mode)
      .flag("--ordered", &a.ordered)
      .flag("--latency", &a.latency)
      .value("--tuples", &a.tuples)
      .value("--die-rank", &a.die_rank)
      .value("--die-after", &a.die_after)
      .value("--ops", &a.ops)
      .value("--rounds", &a.rounds)
      .value("--gap-ms", &a.gap_ms)
      .value("--flush-every", &a.flush_every)
      .value("--signal", &a.signal)
      .value("--late-rank", &a.late_rank)
      .value("--late-ms", &a.late_ms)
      .parse();
  return a;
}

using sluice::testing::fail;

// ------------------------------------------------------------ replicate

int run_replicate(const Args& a, sluice::Cluster& c) {
  const uint32_t n = c.world_size();
  auto spec = sluice::replicate<Rec>("rep")
                  .sources(c.all_ranks(1))
                  .targets([&] {
                    std::vector<sluice::Endpoint> t;
                    for (uint32_t r = 0; r < n; ++r) t.push_back({r, 1});
                    return t;
                  }())
                  .ordered(a.ordered)
                  .gap_timeout(std::chrono::milliseconds(a.gap_ms));
  if (a.latency) spec.optimize(sluice::Optimize::kLatency);
  auto flow = c.declare(spec);
  const uint32_t me = c.rank();
  // A rank that dies while another is still inside declare() (mapping its
  // rings) fails that one's declare with PeerLost: the deaths these tests
  // inject are meant to come after the flow is up everywhere (seen under
  // load: rank 2 took its numbers and died while rank 1 was still mapping).
  if (a.die_rank >= 0) c.barrier("declared");
  if (static_cast<int64_t>(me) == a.die_rank) {
    // Test builds exit right after taking this many sequence numbers.
    setenv("SLUICE_TEST_DIE_AFTER_SEQUENCE", std::to_string(a.die_after).c_str(), 1);
  }
  auto out = c.source(spec, 0);
  auto in = c.target(spec, 1);
  std::string source_error;
  std::thread producer([&] {
    for (uint64_t i = 0; i < a.tuples; ++i) {
      Rec r{me, 0, i, sluice::hash64(i * 7919 + me)};
      if (out.push(r) != sluice::Status::kOk) {
        source_error = out.error();
        std::printf("source (%u,0): %s\n", me, source_error.c_str());
        std::fflush(stdout);
        return;
      }
      // Small batches, so sources interleave in the global order.
      if (a.flush_every != 0 && i % a.flush_every == a.flush_every - 1 &&
          out.flush() != sluice::Status::kOk) {
        source_error = out.error();
        return;
      }
    }
    if (out.close() != sluice::Status::kOk) source_error = out.error();
  });
  // (A failed source reports at once: its target may still be waiting for others.)
  if (static_cast<int64_t>(me) == a.late_rank)
    std::this_thread::sleep_for(std::chrono::milliseconds(a.late_ms));
  std::vector<uint64_t> next(n, 0);
  uint64_t count = 0, sum = 0, order = 0, order_survivors = 0, last_seq = 0, batches = 0;
  bool first = true;
  std::string gaps, problem;
  for (;;) {
    auto batch = in.consume();
    if (!batch) {
      if (in.status() == sluice::Status::kGap) {
        gaps += (gaps.empty() ? "" : ",") + std::to_string(in.gap());
        continue;
      }
      break;
    }
    if (a.ordered) {
      if (!first && in.last_sequence() <= last_seq) problem = "sequence numbers went backwards";
      last_seq = in.last_sequence();
      first = false;
      ++batches;
    }
    for (const Rec& r : *batch) {
      if (r.source >= n) {
        problem = "a record names source " + std::to_string(r.source);
        continue;
      }
      if (r.seq != next[r.source]) {
        problem = "source " + std::to_string(r.source) + " out of order: got " +
                  std::to_string(r.seq) + ", expected " + std::to_string(next[r.source]);
      }
      next[r.source] = r.seq + 1;
      if (r.value != sluice::hash64(r.seq * 7919 + r.source)) problem = "corrupt record";
      const uint64_t fp = fingerprint(r);
      ++count;
      sum += fp;
      order = sluice::hash64(order ^ fp);
      if (static_cast<int64_t>(r.source) != a.die_rank)
        order_survivors = sluice::hash64(order_survivors ^ fp);
    }
  }
  producer.join();
  if (!problem.empty()) return fail("target (" + std::to_string(me) + ",1): " + problem);
  if (!source_error.empty()) std::printf("source (%u,0): %s\n", me, source_error.c_str());
  std::printf(
      "RESULT target=%u count=%llu sum=%016llx order=%016llx survivors=%016llx gaps=[%s] "
      "status=%s\n",
      me, static_cast<unsigned long long>(count), static_cast<unsigned long long>(sum),
      static_cast<unsigned long long>(order), static_cast<unsigned long long>(order_survivors),
      gaps.c_str(), sluice::to_string(in.status()));
  if (a.ordered) {
    // Without gaps, the numbers handed out are exactly 0 .. batches - 1.
    std::printf("SEQUENCES target=%u batches=%llu last=%llu\n", me,
                static_cast<unsigned long long>(batches),
                static_cast<unsigned long long>(last_seq));
  }
  if (in.status() != sluice::Status::kEndOfFlow)
    std::printf("target (%u,1): %s\n", me, in.error().c_str());
  std::fflush(stdout);
  return 0;
}

// ------------------------------------------------------------ closed loop

// NOPaxos-like liveness: ranks 0..2 are replicas, the rest clients. Each
// client pushes one request on an ordered Latency replicate flow through a
// Worker and pushes nothing more until every replica answered it (a reply
// flow back); a request that waits anywhere for a later push from its
// source (a segment not handed over, or not driven while the Worker idles)
// hangs the job. Replicas check they all saw one order.
int run_closed_loop(const Args& a, sluice::Cluster& c) {
  const uint32_t n = c.world_size(), me = c.rank();
  const uint32_t replicas = 3;
  if (n <= replicas) return fail("closed-loop needs more than 3 ranks");
  std::vector<uint32_t> rep_ranks, client_ranks;
  for (uint32_t r = 0; r < n; ++r) (r < replicas ? rep_ranks : client_ranks).push_back(r);
  auto ord = sluice::replicate<Rec>("loop-ord")
                 .sources(c.ranks(client_ranks))
                 .targets(c.ranks(rep_ranks))
                 .ordered()
                 .optimize(sluice::Optimize::kLatency)
                 .gap_timeout(std::chrono::milliseconds(a.gap_ms));
  auto back = sluice::shuffle<Rec>("loop-rep")
                  .sources(c.ranks(rep_ranks))
                  .targets(c.ranks(client_ranks))
                  .explicit_targets()
                  .optimize(sluice::Optimize::kLatency);
  auto ord_flow = c.declare(ord);
  auto back_flow = c.declare(back);
  sluice::Worker w;
  std::string problem;
  if (me < replicas) {
    auto replies = c.source(back, 0);
    uint64_t count = 0, order = 0, last = 0;
    bool first = true;
    w.add(
        c.target(ord, 0),
        [&](std::span<const Rec> batch, const sluice::BatchInfo& info) {
          if (!first && info.sequence != last + 1)
            problem = "sequence numbers skipped or went backwards";
          first = false;
          last = info.sequence;
          for (const Rec& r : batch) {
            ++count;
            order = sluice::hash64(order ^ fingerprint(r));
            Rec answer{me, 0, r.seq, r.value};
            const uint32_t to = r.source - replicas;
            if (w.push_to(replies, to, answer) != sluice::Status::kOk) problem = replies.error();
          }
        },
        [&](uint64_t gap) { problem = "gap " + std::to_string(gap); });
    const sluice::Status st = w.run();
    if (st != sluice::Status::kEndOfFlow)
      problem = std::string("ordered input: ") + sluice::to_string(st);
    if (w.close(replies) != sluice::Status::kOk) problem = replies.error();
    while (!w.done()) w.idle(w.poll());
    if (!problem.empty()) return fail("replica " + std::to_string(me) + ": " + problem);
    std::printf("LOOP replica=%u count=%llu order=%016llx\n", me,
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(order));
    std::fflush(stdout);
    return 0;
  }
  auto requests = c.source(ord, 0);
  uint64_t id = 0, answered = 0;
  w.add(c.target(back, 0), [&](std::span<const Rec> batch) {
    for (const Rec& r : batch) {
      if (r.seq != id || r.value != sluice::hash64(id * 31 + me))
        problem = "an answer to another request";
      ++answered;
    }
  });
  for (; id < a.rounds && problem.empty(); ++id) {
    answered = 0;
    const Rec r{me, 0, id, sluice::hash64(id * 31 + me)};
    if (w.push(requests, r) != sluice::Status::kOk) return fail(requests.error());
    while (answered < replicas && problem.empty()) w.idle(w.poll());
  }
  if (w.close(requests) != sluice::Status::kOk) return fail(requests.error());
  const sluice::Status st = w.run();
  if (!problem.empty()) return fail("client " + std::to_string(me) + ": " + problem);
  if (st != sluice::Status::kEndOfFlow)
    return fail(std::string("answers: ") + sluice::to_string(st));
  std::printf("LOOP client=%u rounds=%llu\n", me, static_cast<unsigned long long>(id));
  std::fflush(stdout);
  return 0;
}

// ------------------------------------------------------------ regions

int run_regions(const Args& a, sluice::Cluster& c) {
  const uint32_t me = c.rank(), n = c.world_size();
  constexpr size_t kBlock = 10000;
  sluice::MemoryRegion counter, blob;
  if (me == 0) {
    counter = c.expose("counter", 4096);
    blob = c.expose("blob", 64 * 1024);
  }
  auto ctr = c.open_region("counter", 0);
  auto data = c.open_region("blob", 0);
  if (me == 0) std::printf("region path: %s (owner: %s)\n", ctr.path(), counter.path());
  // CAS loops and fetch_adds from every rank, the owner included.
  for (uint64_t i = 0; i < a.ops; ++i) {
    uint64_t seen = 0;
    if (ctr.read(0, std::as_writable_bytes(std::span(&seen, 1))) != sluice::Status::kOk)
      return fail(ctr.error());
    for (;;) {
      const auto prev = ctr.compare_and_swap(0, seen, seen + 1);
      if (!prev) return fail(ctr.error());
      if (*prev == seen) break;
      seen = *prev;
    }
    if (!ctr.fetch_add(8, 1)) return fail(ctr.error());
  }
  // Bulk write and read back, larger than one emulated message.
  std::vector<std::byte> mine(kBlock), theirs(kBlock);
  for (size_t i = 0; i < kBlock; ++i) mine[i] = std::byte(static_cast<unsigned char>(i * 31 + me));
  if (data.write(me * 12000, mine) != sluice::Status::kOk) return fail(data.error());
  // Bounds and alignment are refused, and nothing breaks.
  std::byte two[16];
  if (ctr.read(4090, two) != sluice::Status::kInvalid)
    return fail("read past the end was not refused");
  if (ctr.error().find("outside") == std::string::npos)
    return fail("bounds error does not say why: " + ctr.error());
  if (ctr.fetch_add(4, 1).status() != sluice::Status::kInvalid)
    return fail("misaligned fetch_add was not refused");
  try {
    (void)c.open_region("nonexistent", 0, sluice::Clock::now() + std::chrono::milliseconds(200));
    return fail("opening a region nobody exposed succeeded");
  } catch (const sluice::Error& e) {
    if (e.code() != sluice::ErrorCode::kTimeout)
      return fail(std::string("unexpected error: ") + e.what());
  }
  c.barrier("written");
  const uint32_t peer = (me + 1) % n;
  if (data.read(peer * 12000, theirs) != sluice::Status::kOk) return fail(data.error());
  for (size_t i = 0; i < kBlock; ++i) {
    if (theirs[i] != std::byte(static_cast<unsigned char>(i * 31 + peer))) {
      return fail("block of rank " + std::to_string(peer) + " differs at byte " +
                  std::to_string(i));
    }
  }
  c.barrier("counted");
  if (me == 0) {
    uint64_t words[2];
    if (ctr.read(0, std::as_writable_bytes(std::span(words, 2))) != sluice::Status::kOk)
      return fail(ctr.error());
    std::printf("COUNTERS cas=%llu fetch_add=%llu expected=%llu\n",
                static_cast<unsigned long long>(words[0]),
                static_cast<unsigned long long>(words[1]),
                static_cast<unsigned long long>(a.ops * n));
    if (words[0] != a.ops * n || words[1] != a.ops * n) return fail("counters are not exact");
    counter.revoke();
  }
  c.barrier("revoked");
  if (ctr.fetch_add(8, 1).status() != sluice::Status::kClosed) {
    return fail("an access after revoke was not refused: " + ctr.error());
  }
  std::printf("revoked: %s\n", ctr.error().c_str());
  // The other region is still fine.
  if (data.read(peer * 12000, theirs) != sluice::Status::kOk) return fail(data.error());
  c.barrier("done");
  std::printf("VERIFIED regions rank %u\n", me);
  return 0;
}

// ------------------------------------------------------------ barriers

int run_barriers(const Args& a, sluice::Cluster& c) {
  const uint32_t me = c.rank(), n = c.world_size();
  constexpr uint32_t kSlots = 2;
  const auto members = c.all_ranks(kSlots);
  sluice::MemoryRegion arrivals;
  if (me == 0) arrivals = c.expose("arrivals", 64);
  c.barrier("exposed");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    threads.emplace_back([&, slot] {
      auto r = c.open_region("arrivals", 0);
      for (uint64_t round = 0; round < a.rounds; ++round) {
        if (!r.fetch_add(0, 1)) {
          std::printf("FAILED: %s\n", r.error().c_str());
          ++failures;
          return;
        }
        c.barrier("all", members, slot);
        // Everyone arrived for this round before anyone left it.
        uint64_t now = 0;
        if (r.read(0, std::as_writable_bytes(std::span(&now, 1))) != sluice::Status::kOk ||
            now < (round + 1) * members.size()) {
          std::printf("FAILED: round %llu left the barrier with %llu arrivals\n",
                      static_cast<unsigned long long>(round), static_cast<unsigned long long>(now));
          ++failures;
          return;
        }
        // A second barrier keeps fast endpoints from counting the next round early.
        c.barrier("all-out", members, slot);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures != 0) return 1;
  // A subset meets without the others.
  if (me == 1 || me == 2) c.barrier("pair", c.ranks({1, 2}, 1), 0);
  // A member that never comes: a timeout naming it.
  if (me == 0) {
    try {
      c.barrier("lonely", {{0, 0}, {n - 1, 7}}, 0,
                sluice::Clock::now() + std::chrono::milliseconds(300));
      return fail("a barrier with an absent member completed");
    } catch (const sluice::Error& e) {
      if (e.code() != sluice::ErrorCode::kTimeout ||
          std::string(e.what()).find("(" + std::to_string(n - 1) + ",7)") == std::string::npos) {
        return fail(std::string("unexpected barrier error: ") + e.what());
      }
      std::printf("timeout: %s\n", e.what());
    }
  }
  c.barrier("done");
  std::printf("VERIFIED barriers rank %u rounds %llu\n", me,
              static_cast<unsigned long long>(a.rounds));
  return 0;
}

// ------------------------------------------------------------ stale descriptors

// Rank 0 exposes "old", destroys it, and exposes "new" of the same size (over
// shm its memfd takes the fd number "old" had). Rank 1 opens "old" from the
// descriptor still in the registry: it must be refused, not mapped to "new".
int run_stale(sluice::Cluster& c) {
  const uint32_t me = c.rank();
  sluice::MemoryRegion fresh;
  if (me == 0) {
    {
      auto old = c.expose("old", 4096);
      std::memset(old.data(), 0x11, 4096);
    }
    fresh = c.expose("new", 4096);
    std::memset(fresh.data(), 0x22, 4096);
    std::printf("new region path: %s\n", fresh.path());
  }
  c.barrier("exposed");
  if (me == 1) {
    try {
      auto r = c.open_region("old", 0);
      std::byte b[8];
      const sluice::Status s = r.read(0, b, sluice::Clock::now() + std::chrono::seconds(2));
      if (s == sluice::Status::kOk) {
        return fail("a destroyed region's descriptor reached live memory (first byte " +
                    std::to_string(static_cast<int>(b[0])) + ")");
      }
      std::printf("STALE refused: %s: %s\n", sluice::to_string(s), r.error().c_str());
    } catch (const sluice::Error& e) {
      std::printf("STALE refused: %s\n", e.what());
    }
  }
  c.barrier("done");
  return 0;
}

// ------------------------------------------------------------ re-exposure

// Rank 0 exposes region "again" five times, each time with other contents,
// and destroys it in between. Rank 1 reads each incarnation through a new
// handle; between incarnations opening it fails at once (no deadline given),
// and the previous incarnation's handle no longer reaches memory.
int run_reexpose(sluice::Cluster& c) {
  const uint32_t me = c.rank();
  for (int round = 0; round < 5; ++round) {
    const auto fill = static_cast<std::byte>(0x10 + round);
    sluice::MemoryRegion region;
    if (me == 0) {
      region = c.expose("again", 4096);
      std::memset(region.data(), static_cast<int>(fill), 4096);
    }
    c.barrier("exposed");
    sluice::RemoteRegion r;
    if (me == 1) {
      r = c.open_region("again", 0);
      std::byte b[8];
      const sluice::Status s = r.read(0, b, sluice::Clock::now() + std::chrono::seconds(10));
      if (s != sluice::Status::kOk)
        return fail("read of incarnation " + std::to_string(round) + ": " + r.error());
      if (b[0] != fill || b[7] != fill) {
        return fail("incarnation " + std::to_string(round) + " read byte " +
                    std::to_string(static_cast<int>(b[0])));
      }
    }
    c.barrier("read");
    if (me == 0) region = sluice::MemoryRegion();  // destroyed: withdrawn from the registry
    c.barrier("destroyed");
    if (me == 1) {
      std::byte b[8];
      if (r.read(0, b, sluice::Clock::now() + std::chrono::seconds(2)) == sluice::Status::kOk) {
        return fail("a destroyed region's handle still reads memory");
      }
      const auto started = sluice::Clock::now();
      try {
        (void)c.open_region("again", 0);
        return fail("opened a destroyed region");
      } catch (const sluice::Error& e) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(sluice::Clock::now() - started)
                .count();
        if (e.code() != sluice::ErrorCode::kInvalidArgument ||
            std::string(e.what()).find("destroyed") == std::string::npos || ms > 2000) {
          return fail(std::string("opening a destroyed region: ") + e.what() + " after " +
                      std::to_string(ms) + " ms");
        }
        if (round == 0)
          std::printf("DESTROYED refused in %lld ms: %s\n", static_cast<long long>(ms), e.what());
      }
    }
    c.barrier("checked");
  }
  std::printf("VERIFIED reexpose rank %u\n", me);
  return 0;
}

// ------------------------------------------------------------ owner lost

// Rank 1 exposes a region, every other rank opens it and reads it, then
// rank 1 dies (SIGKILL). Each other rank keeps reading, with a deadline per
// read, until a read fails: it must fail with kPeerLost naming rank 1,
// within 20 s, over shm (whose mapping outlives the owner) and over ofi.
int run_owner_dies(sluice::Cluster& c) {
  const uint32_t me = c.rank();
  constexpr uint32_t kOwner = 1;
  sluice::MemoryRegion region;
  if (me == kOwner) {
    region = c.expose("mortal", 4096);
    std::memset(region.data(), 0x5a, 4096);
  }
  c.barrier("exposed");
  std::optional<sluice::RemoteRegion> r;
  std::byte b[64];
  if (me != kOwner) {
    r.emplace(c.open_region("mortal", kOwner));
    if (r->read(0, b, sluice::Clock::now() + std::chrono::seconds(5)) != sluice::Status::kOk ||
        b[0] != std::byte{0x5a}) {
      return fail("first read of 'mortal': " + r->error());
    }
  }
  c.barrier("opened");
  if (me == kOwner) {
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
  const auto until = sluice::Clock::now() + std::chrono::seconds(20);
  sluice::Status s = sluice::Status::kOk;
  while (s == sluice::Status::kOk && sluice::Clock::now() < until) {
    s = r->read(0, b, sluice::Clock::now() + std::chrono::seconds(2));
    if (s == sluice::Status::kOk) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (s != sluice::Status::kPeerLost) {
    return fail(std::string("reads after the owner died: ") + sluice::to_string(s) + ": " +
                r->error());
  }
  if (r->error().find("rank 1") == std::string::npos)
    return fail("kPeerLost names no rank 1: " + r->error());
  std::printf("VERIFIED owner-lost rank %u over %s: %s\n", me, r->path(), r->error().c_str());
  return 0;
}

// ------------------------------------------------------------ signals

// Dies of `a.signal` with a region's ofi endpoint open (with
// SLUICE_TRANSPORT=ofi): a real fault for SIGSEGV, raise() otherwise.
int run_signal(const Args& a, sluice::Cluster& c) {
  auto region = c.expose("doomed", 64);
  std::printf("exposed over %s; dying of signal %d\n", region.path(), a.signal);
  std::fflush(stdout);
  if (a.signal == SIGSEGV) {
    volatile uintptr_t nowhere = 8;  // volatile: the compiler cannot see the fault coming
    *reinterpret_cast<volatile int*>(nowhere) = 1;
  } else {
    std::raise(a.signal);
  }
  return fail("still alive after signal " + std::to_string(a.signal));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    auto c = sluice::Cluster::join();
    if (a.mode == "replicate") return sluice::testing::leave_after(c, run_replicate(a, c));
    if (a.mode == "regions") return sluice::testing::leave_after(c, run_regions(a, c));
    if (a.mode == "closed-loop") return sluice::testing::leave_after(c, run_closed_loop(a, c));
    if (a.mode == "barriers") return sluice::testing::leave_after(c, run_barriers(a, c));
    if (a.mode == "signal") return sluice::testing::leave_after(c, run_signal(a, c));
    if (a.mode == "stale") return sluice::testing::leave_after(c, run_stale(c));
    if (a.mode == "reexpose") return sluice::testing::leave_after(c, run_reexpose(c));
    if (a.mode == "owner-dies") return sluice::testing::leave_after(c, run_owner_dies(c));
    return fail("unknown mode " + a.mode);
  } catch (const sluice::Error& e) {
    return fail(std::string(sluice::to_string(e.code())) + ": " + e.what());
  }
}
