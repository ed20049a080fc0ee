// The fault worker's scenarios across membership views (fault_worker.cc
// lists every scenario): a rank killed from outside, the survivors agree on
// the next view and rebuild their flow among its members (rebuild), and the
// killed rank, started again, joins them as its next incarnation (rejoin).
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

namespace {

// A new shuffle among `ranks` ("orders" + suffix): each pushes n records
// and the first of them checks every rank's totals (exactly once) on a
// second flow. `meanwhile` runs on every rank once its totals went out.
// Returns the records the check counted on the first rank, 0 elsewhere.
template <class Fn>
uint64_t deliver_among(sluice::Cluster& c, const std::vector<uint32_t>& ranks,
                       const std::string& suffix, uint64_t n, Fn&& meanwhile) {
  auto spec = sluice::shuffle<Rec>("orders" + suffix)
                  .sources(c.ranks(ranks))
                  .targets(c.ranks(ranks))
                  .key(&Rec::key);
  auto totals_spec = sluice::shuffle<Totals>("totals" + suffix)
                         .sources(c.ranks(ranks))
                         .targets(c.ranks({ranks[0]}));
  auto flow = c.declare(spec);
  auto totals_flow = c.declare(totals_spec);
  Totals got;
  {
    auto out = c.source(spec, 0);
    sluice::Worker w;
    w.add(c.target(spec, 0), [&](std::span<const Rec> b) {
      for (const Rec& r : b) got.add(r);
    });
    for (uint64_t i = 0; i < n; ++i) {
      if (w.push(out, Rec{mix(i * 7919 + c.rank()), i + c.rank()}) != Status::kOk) {
        failed("push to flow 'orders" + suffix + "': " + out.error());
      }
    }
    if (w.close(out) != Status::kOk) failed("close flow 'orders" + suffix + "': " + out.error());
    if (w.run() != Status::kEndOfFlow)
      failed("flow 'orders" + suffix + "': the input did not end cleanly");
  }
  auto tout = c.source(totals_spec, 0);
  if (tout.push(got) != Status::kOk || tout.close() != Status::kOk)
    failed("totals: " + tout.error());
  meanwhile();
  if (c.rank() != ranks[0]) return 0;
  auto tin = c.target(totals_spec, 0);
  Totals all;
  while (auto b = tin.consume()) {
    for (const Totals& t : *b) {
      all.count += t.count;
      all.sum += t.sum;
    }
  }
  if (tin.status() != Status::kEndOfFlow) failed("totals: " + tin.error());
  Totals expect;
  for (uint32_t r : ranks) {
    for (uint64_t i = 0; i < n; ++i) expect.add(Rec{0, i + r});
  }
  if (all.count != expect.count || all.sum != expect.sum) {
    failed("flow 'orders" + suffix + "': got " + std::to_string(all.count) + " records (sum " +
           std::to_string(all.sum) + "), expected " + std::to_string(expect.count) + " (sum " +
           std::to_string(expect.sum) + ")");
  }
  return all.count;
}

// A shuffle among all ranks, pushed into through a Worker until a push
// fails (the launcher kills a rank: nobody here knows which or when), which
// must be kPeerLost. Every 64 pushes, `poll()` may look around (a new view).
// `after(w, out)` runs once the push failed, while the flow still exists
// (not when the kill came before the flow was set up: then the set-up's
// PeerLostError is the LOST line).
void push_until_lost(sluice::Cluster& c, Clock::time_point start, const std::function<void()>& poll,
                     const std::function<void(sluice::Worker&, sluice::Source<Rec>&)>& after) {
  auto spec =
      sluice::shuffle<Rec>("orders").sources(c.all_ranks()).targets(c.all_ranks()).key(&Rec::key);
  try {
    auto flow = c.declare(spec);
    auto out = c.source(spec, 0);
    sluice::Worker w;
    w.add(c.target(spec, 0), [](std::span<const Rec>) {});
    c.barrier("declared");
    std::printf("PUSHING\n");
    std::fflush(stdout);
    Status s = Status::kOk;
    for (uint64_t i = 0; s == Status::kOk; ++i) {
      if (i % 64 == 0) poll();
      s = w.push(out, Rec{mix(i + c.rank()), i});
    }
    if (s != Status::kPeerLost)
      failed("push: " + std::string(sluice::to_string(s)) + ": " + out.error());
    after(w, out);
    lost(start, "push: " + out.error());
    // Leaving the scope destroys the source, the target (in the Worker) and
    // then the flow, which the Cluster lets go of in the background.
  } catch (const sluice::PeerLostError& e) {
    // The kill landed while the flow was being set up (a slow machine):
    // there is no flow to fail, and the survivors go on from the loss.
    lost(start, std::string("set-up: ") + e.what());
  }
}

std::string rank_text(const std::vector<uint32_t>& ranks) {
  std::string text;
  for (uint32_t r : ranks) text += " " + std::to_string(r);
  return text;
}

}  // namespace

// Survivors of a rank killed from outside (sluice run --kill; no rank knows
// which or when) rebuild their flow among the members of the next view (what
// apps/kv does by hand): each pushes into a shuffle among all ranks until
// kPeerLost, waits for the view that no longer holds the lost rank, agrees
// on it with the others (Cluster::agree), declares a new flow among the
// agreed members and pushes N records into it. The lowest survivor checks
// the new flow's totals (exactly once) on a third flow among them.
int rebuild(sluice::Cluster& c, const Args& a) {
  const auto start = Clock::now();
  push_until_lost(
      c, start, [] {}, [](sluice::Worker&, sluice::Source<Rec>&) {});
  // The transport may see the loss before the registry does: the view
  // follows within the peer timeout.
  if (!c.await_view(0, Clock::now() + std::chrono::seconds(30)))
    failed("no view after epoch 0 within 30 s");
  const sluice::Gathered g = c.agree("rebuild", "", Clock::now() + std::chrono::seconds(30));
  std::printf("LIVE%s (view %" PRIu64 ", flow destroyed after %.0f ms)\n",
              rank_text(g.ranks).c_str(), g.epoch, ms_since(start));
  std::fflush(stdout);
  if (g.ranks.size() + 1 != c.world_size())
    failed("the agreed view has " + std::to_string(g.ranks.size()) + " ranks");
  const uint64_t n = deliver_among(c, g.ranks, "-view-" + std::to_string(g.epoch), a.n, [] {});
  if (n != 0)
    std::printf("VERIFIED %" PRIu64 " records on the flow rebuilt among %zu ranks\n", n,
                g.ranks.size());
  return 0;
}

// A rank killed from outside comes back (sluice run --kill ... --restarts 1)
// as incarnation 1. The survivors push into a shuffle among all ranks until
// a push fails, or until they see a new view, when they hold the old flow
// until the rank is back. Either way, once it is back, a push into the old
// flow must fail with kPeerLost: the flow belongs to incarnation 0. Then
// every rank, the new process included, agrees on the view, declares a new
// flow among all ranks and pushes N records (rank 0 checks them exactly
// once), and all meet again at the barrier they met at before: the new
// process's first call meets the survivors' second.
int rejoin(sluice::Cluster& c, const Args& a) {
  const auto start = Clock::now();
  const uint32_t me = c.incarnation(c.rank());
  auto await_rejoin = [&] {
    for (const auto until = Clock::now() + std::chrono::seconds(30);;) {
      const sluice::View v = c.view();
      for (uint32_t r = 0; r < c.world_size(); ++r) {
        if (v.incarnations[r] > 0 && v.contains(r)) {
          std::printf("REJOINED rank %u as incarnation %u\n", r, v.incarnations[r]);
          std::fflush(stdout);
          return;
        }
      }
      if (Clock::now() > until) failed("no rank rejoined within 30 s");
      (void)c.await_view(v.epoch, Clock::now() + std::chrono::seconds(1));
    }
  };
  if (me == 0) {
    bool back = false;
    push_until_lost(
        c, start,
        [&] {
          if (back || c.view().epoch == 0) return;
          await_rejoin();  // a new view: hold the old flow until the rank is back
          back = true;
        },
        [&](sluice::Worker& w, sluice::Source<Rec>& out) {
          if (!back) await_rejoin();  // the push failed before the view arrived
          back = true;
          const Status again = w.push(out, Rec{1, 1});
          std::printf("OLD FLOW %s after the rejoin\n", sluice::to_string(again));
        });
    if (!back) await_rejoin();  // killed during the set-up: no flow to hold
  } else {
    std::printf("RESTARTED as incarnation %u\n", me);
  }
  std::fflush(stdout);
  const sluice::Gathered g = c.agree("rejoin", "", Clock::now() + std::chrono::seconds(30));
  if (g.ranks.size() != c.world_size())
    failed("the agreed view has " + std::to_string(g.ranks.size()) + " ranks");
  // The barrier: the survivors' second call, the new process's first.
  const uint64_t n = deliver_among(c, g.ranks, "-again", a.n, [&] { c.barrier("declared"); });
  if (n != 0) std::printf("VERIFIED %" PRIu64 " records with every rank back\n", n);
  return 0;
}

}  // namespace fault_worker
