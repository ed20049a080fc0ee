// The fault worker's long-running flows (fault_worker.cc lists every
// scenario): an ordered replicate flow one of whose sources goes quiet
// mid-flow, which must never be taken for a gap (ordered-idle), and the
// soak's iteration over a shuffle or an ordered flow (soak).
#include <sluice/sluice.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "fault_worker.h"

namespace fault_worker {

// Rank 1 of two sources goes quiet halfway through an ordered flow: every
// target must get every record, in one order, with no gap declared.
int ordered_idle(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::replicate<Rec>("oi")
                  .sources(c.ranks({0, 1}))
                  .targets(c.all_ranks())
                  .segment_bytes(256)
                  .ordered()
                  // Well under rank 1's 1500 ms quiet spell, so a batch held
                  // back through it would be a gap; long enough that a rank
                  // descheduled under load (CI runs ctest -j) is not one.
                  .gap_timeout(std::chrono::milliseconds(600));
  auto flow = c.declare(spec);
  Totals got;
  uint64_t order = 0, gaps = 0;
  auto in = c.target(spec, 0);
  auto take = [&](std::span<const Rec> b) {
    for (const Rec& r : b) {
      got.add(r);
      order = mix(order ^ r.value);
    }
  };
  auto drain = [&] {
    for (;;) {
      auto b = in.try_consume();
      if (b) {
        take(*b);
        continue;
      }
      if (in.status() == Status::kGap) {
        ++gaps;
        continue;
      }
      if (in.status() != Status::kWouldBlock) failed("try_consume: " + in.error());
      return;
    }
  };
  if (c.rank() <= 1) {
    auto out = c.source(spec, 0);
    for (uint64_t i = 0; i < a.n; ++i) {
      // Rank 1 goes quiet halfway, with whatever it could not hand over yet.
      if (c.rank() == 1 && i == a.n / 2) {
        for (auto until = Clock::now() + std::chrono::milliseconds(1500); Clock::now() < until;) {
          drain();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      Status s;
      while ((s = out.try_push(Rec{i, uint64_t{c.rank()} << 40 | i})) == Status::kWouldBlock)
        drain();
      if (s != Status::kOk) failed("try_push: " + out.error());
      if (c.rank() == 0 && i % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    Status s;
    while ((s = out.close(Clock::now())) == Status::kTimeout) drain();
    if (s != Status::kOk) failed("close: " + out.error());
  }
  for (;;) {
    auto b = in.consume(Clock::now() + std::chrono::seconds(60));
    if (b) {
      take(*b);
      continue;
    }
    if (in.status() == Status::kGap) {
      ++gaps;
      continue;
    }
    break;
  }
  if (in.status() != Status::kEndOfFlow) failed("consume: " + in.error());
  if (gaps != 0)
    failed("rank " + std::to_string(c.rank()) + " saw " + std::to_string(gaps) + " gap(s)");
  auto orders = c.allgather("order", std::to_string(order));
  for (const std::string& o : orders) {
    if (o != orders[0]) failed("targets disagree on the order");
  }
  if (got.count != 2 * a.n || got.sum != expected_sum(2, a.n)) {
    failed("rank " + std::to_string(c.rank()) + " got " + std::to_string(got.count) + " of " +
           std::to_string(2 * a.n));
  }
  if (c.rank() == 0) std::printf("VERIFIED %" PRIu64 " records in one order, no gaps\n", got.count);
  return 0;
}

namespace {

// One soak iteration: every rank is a source and a target of an N:M shuffle
// (or of an ordered replicate flow), driven by the README's single-thread
// pattern; every rank marks --k records ("AT rank R record K"), where the
// test's launcher may kill or stop one (unannounced), or the --victim
// destroys its target there (--fault target), or nothing happens. A run without a fault must verify
// exact totals; a run with one must end on every survivor with kPeerLost
// naming the victim, never with wrong totals or a hang.
template <class Out, class In>
void soak_run(sluice::Cluster& c, const Args& a, Out& out, In& in, Totals& got, uint64_t& gaps,
              uint64_t& order) {
  const auto start = Clock::now();
  auto report = [&](const std::string& what, const std::string& error,
                    const std::optional<sluice::LostPeer>& peer) {
    lost(start, "[lost_peer " + (peer ? std::to_string(peer->rank) : std::string("none")) + "] " +
                    what + ": " + error);
    // Stay while the other survivors reach their own report: on an ordered
    // flow a source learns of a lost target only at close().
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
    std::_Exit(3);
  };
  // The one fault the program makes itself (an app's own act, not a crash):
  // --fault target. Kills and stops come from the launcher at the mark.
  const bool victim = c.rank() == a.victim && a.fault == "target";
  bool target_gone = false;
  auto take = [&](auto b) {
    for (const Rec& r : *b) {
      got.add(r);
      order = mix(order ^ r.value);
    }
  };
  auto drain = [&] {
    if (target_gone) return;
    for (;;) {
      auto b = in.try_consume();
      if (b) {
        take(b);
        continue;
      }
      if (in.status() == Status::kGap) {
        ++gaps;
        continue;
      }
      if (in.status() == Status::kPeerLost) report("try_consume", in.error(), in.lost_peer());
      return;
    }
  };
  for (uint64_t i = 0; i < a.n; ++i) {
    if (i == a.k) {
      if (victim) {
        in = In();
        target_gone = true;
        std::printf("VICTIM destroyed its target\n");
      }
      mark(c, a.k);
    }
    Status s;
    while ((s = out.try_push(Rec{mix(i * 7 + c.rank()), uint64_t{c.rank()} << 40 | i})) ==
           Status::kWouldBlock) {
      drain();
    }
    if (s == Status::kPeerLost) report("try_push", out.error(), out.lost_peer());
    if (s != Status::kOk) failed("try_push: " + out.error());
  }
  Status s;
  while ((s = out.close(Clock::now())) == Status::kTimeout) drain();
  if (s == Status::kPeerLost) report("close", out.error(), out.lost_peer());
  if (s != Status::kOk) failed("close: " + out.error());
  if (target_gone) {
    // What the sources sent us is lost with our target: the others must say
    // so; this rank has nothing to verify.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(0);
  }
  for (;;) {
    auto b = in.consume(Clock::now() + std::chrono::seconds(60));
    if (b) {
      take(b);
      continue;
    }
    if (in.status() == Status::kGap) {
      ++gaps;
      continue;
    }
    break;
  }
  if (in.status() == Status::kPeerLost) report("consume", in.error(), in.lost_peer());
  if (in.status() != Status::kEndOfFlow) {
    failed(std::string("consume: ") + sluice::to_string(in.status()) + ": " + in.error());
  }
}

}  // namespace

int soak(sluice::Cluster& c, const Args& a) {
  Totals got;
  uint64_t gaps = 0, order = 0;
  if (a.ordered) {
    auto spec = sluice::replicate<Rec>("soak")
                    .sources(c.all_ranks())
                    .targets(c.all_ranks())
                    .segment_bytes(512)
                    .ordered()
                    .gap_timeout(std::chrono::milliseconds(200));
    auto flow = c.declare(spec);
    auto out = c.source(spec, 0);
    auto in = c.target(spec, 0);
    c.barrier("declared");
    soak_run(c, a, out, in, got, gaps, order);
    if (gaps != 0) failed("a run without a fault saw " + std::to_string(gaps) + " gap(s)");
    // Every target got every record of every source, in one order.
    if (got.count != a.n * c.world_size() || got.sum != expected_sum(c.world_size(), a.n)) {
      failed("rank " + std::to_string(c.rank()) + " got " + std::to_string(got.count) + " records");
    }
    for (const std::string& o : c.allgather("soak-order", std::to_string(order))) {
      if (o != std::to_string(order)) failed("targets disagree on the order");
    }
    const uint64_t w = c.world_size();
    check_totals(c, got, a.n * w * w, w * expected_sum(c.world_size(), a.n));
  } else {
    auto spec = sluice::shuffle<Rec>("soak")
                    .sources(c.all_ranks())
                    .targets(c.all_ranks())
                    .key(&Rec::key)
                    .segment_bytes(512);
    auto flow = c.declare(spec);
    auto out = c.source(spec, 0);
    auto in = c.target(spec, 0);
    c.barrier("declared");
    soak_run(c, a, out, in, got, gaps, order);
    check_totals(c, got, a.n * c.world_size(), expected_sum(c.world_size(), a.n));
  }
  return 0;
}

}  // namespace fault_worker
