// The program the fault tests (faults_test.cc) run under `sluice run`: one
// scenario of the reliability review per --scenario, each printing lines the
// test checks ("VERIFIED ...", "LOST <ms> <error>", "FAILED: ...").
//
//   single-thread   every rank one thread, a shuffle to all ranks: push N
//                   records, close(), then consume (--try: try_push and a
//                   drain, --latency: Latency mode). Rank 0 checks the totals.
//   replicate-lead  rank 0 replicates N records to targets on ranks 1 and 2;
//                   each target marks K records ("AT rank R record K"),
//                   where the test's launcher kills rank 1; rank 2 must get
//                   all N.
//   readme          the README's single-thread pattern on every rank; each
//                   prints "AT rank R record K" after K records and pauses
//                   500 ms; the test has the launcher kill (or stop) one
//                   rank on its line (sluice run --faults-after; no rank is
//                   told): the others must report kPeerLost naming it.
//   target-abort    rank 1 destroys its target after K records and stays
//                   alive (in a barrier) until rank 0's blocked push has
//                   reported it.
//   source-abort    rank 0 destroys its source without close() after K
//                   records (with --abort: calls Source::abort() and keeps
//                   it) and stays alive (in a barrier) until rank 1's target
//                   has reported it.
//   ordered-idle    ordered replicate from ranks 0 and 1 to every rank; rank
//                   1 goes idle for a while mid-flow: no gap may be declared.
//   slow-target     rank 0 pushes N records to rank 1, closes and destroys
//                   its source at once and waits; rank 1 consumes slowly
//                   (a pause after every batch): it must get all N.
//   rebuild         a shuffle among all ranks until the launcher kills one
//                   (sluice run --keep-going --kill; nobody is told); the
//                   survivors agree on the next view and push N records
//                   exactly once through a flow among its members.
//   rejoin          as rebuild, under sluice run --restarts 1: the killed
//                   rank comes back as incarnation 1 and joins the new flow.
//   combiner        a combiner flow from every rank to every rank, each
//                   rank's thread a source and a target through a Worker;
//                   the launcher kills a rank at its "AT rank R record K"
//                   line, as in readme: the others must report kPeerLost
//                   naming it (lost_peer() of the combiner source or of the
//                   Worker's combiner input).
//   fence           ranks 1.. write into their words of rank 0's region;
//   flow-fence      ranks 1.. push stamped records into a flow to rank 0
//                   (--ordered: an ordered one): rank 2 is stopped at its
//                   mark by standalone_job.sh and resumed once rank 0 is in
//                   the view without it; nothing it writes or pushes after
//                   the view may land or come out (fence_scenarios.cc).
#include <signal.h>
#include <sluice/sluice.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fence_scenarios.h"
#include "support/job_args.h"

namespace {

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

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

[[noreturn]] void failed(const std::string& what) { std::_Exit(sluice::testing::fail(what)); }

// Every rank's mark after K records, for `sluice run --faults-after "AT rank
// R record"`: the launcher kills (or stops) rank R there, unannounced.
void mark(const sluice::Cluster& c, uint64_t k) {
  std::printf("AT rank %u record %" PRIu64 "\n", c.rank(), k);
  std::fflush(stdout);
}

void lost(Clock::time_point since, const std::string& error) {
  std::printf("LOST %.0f %s\n", ms_since(since), error.c_str());
  std::fflush(stdout);
}

// A survivor's report of the victim: a LOST line carrying lost_peer() as
// "[lost_peer N]" before the message, then a 3 s stay (so that the other
// survivors see the victim's end, not ours) and exit 3. With a Worker, the
// stay keeps consuming through it: the others' pushes into this rank must go
// on until they too run into the victim rather than into this rank's stay.
[[noreturn]] void report_lost(Clock::time_point since, const std::string& what,
                              const std::string& error, const std::optional<sluice::LostPeer>& peer,
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
void check_totals(sluice::Cluster& c, const Totals& mine, uint64_t expect_count,
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

uint64_t expected_sum(uint32_t ranks, uint64_t n) {
  uint64_t sum = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    for (uint64_t i = 0; i < n; ++i) sum += mix(uint64_t{r} << 40 | i);
  }
  return sum;
}

// A Worker's pushes and flush toward a target whose provider queue stays
// full (SLUICE_TEST_OFI_EAGAIN_EVERY=1 refuses every post) must end in
// kPeerLost once the target's rank is lost, not retry for ever: a Worker
// polls with a past deadline, so the loss must be looked at before the
// deadline. Rank 1 holds the target and never consumes; the launcher kills
// it from outside (no rank is told).
int worker_lost_target(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::shuffle<Rec>("lost-target")
                  .sources(c.ranks({0}))
                  .targets(c.ranks({1}))
                  .explicit_targets();
  auto flow = c.declare(spec);
  if (c.rank() == 1) {
    auto in = c.target(spec, 0);
    std::printf("TARGET READY\n");
    std::fflush(stdout);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  sluice::Worker w;
  auto out = c.source(spec, 0);
  sluice::Status st = sluice::Status::kOk;
  uint64_t pushed = 0;
  for (; pushed < a.n && st == sluice::Status::kOk; ++pushed)
    st = w.push_to(out, 0, Rec{pushed, 1});
  if (st == sluice::Status::kOk) st = w.flush(out);
  std::printf("WORKER %s after %" PRIu64 " pushes: %s\n", sluice::to_string(st), pushed,
              out.error().c_str());
  std::fflush(stdout);
  out.abort();
  return st == sluice::Status::kPeerLost ? 0 : 1;
}

int single_thread(sluice::Cluster& c, const Args& a) {
  auto spec =
      sluice::shuffle<Rec>("st").sources(c.all_ranks()).targets(c.all_ranks()).key(&Rec::key);
  if (a.latency) spec.optimize(sluice::Optimize::kLatency);
  auto flow = c.declare(spec);
  auto out = c.source(spec, 0);
  auto in = c.target(spec, 0);
  Totals got;
  auto drain = [&] {
    while (auto b = in.try_consume()) {
      for (const Rec& r : *b) got.add(r);
    }
    if (in.status() != Status::kWouldBlock && in.status() != Status::kOk &&
        in.status() != Status::kEndOfFlow) {
      failed("try_consume: " + in.error());
    }
  };
  for (uint64_t i = 0; i < a.n; ++i) {
    const Rec r{mix(i * 31 + c.rank()), uint64_t{c.rank()} << 40 | i};
    if (a.try_mode) {
      Status s;
      while ((s = out.try_push(r)) == Status::kWouldBlock) drain();
      if (s != Status::kOk) failed("try_push: " + out.error());
    } else if (out.push(r, Clock::now() + std::chrono::seconds(60)) != Status::kOk) {
      failed("push: " + out.error());
    }
  }
  if (a.try_mode) {
    Status s;
    while ((s = out.close(Clock::now())) == Status::kTimeout) drain();
    if (s != Status::kOk) failed("close: " + out.error());
  } else if (out.close(Clock::now() + std::chrono::seconds(60)) != Status::kOk) {
    failed("close: " + out.error());
  }
  while (auto b = in.consume(Clock::now() + std::chrono::seconds(60))) {
    for (const Rec& r : *b) got.add(r);
  }
  if (in.status() != Status::kEndOfFlow) failed("consume: " + in.error());
  check_totals(c, got, a.n * c.world_size(), expected_sum(c.world_size(), a.n));
  return 0;
}

int replicate_lead(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::replicate<Rec>("rl")
                  .sources(c.ranks({0}))
                  .targets(c.ranks({1, 2}))
                  .segment_bytes(512);
  auto flow = c.declare(spec);
  if (c.rank() == 0) {
    auto out = c.source(spec, 0);
    for (uint64_t i = 0; i < a.n; ++i) {
      if (out.push(Rec{i, i}, Clock::now() + std::chrono::seconds(60)) != Status::kOk) {
        failed("push " + std::to_string(i) + ": " + out.error());
      }
    }
    const Status s = out.close(Clock::now() + std::chrono::seconds(60));
    std::printf("SOURCE close=%s %s\n", sluice::to_string(s), out.error().c_str());
    std::fflush(stdout);
    return 0;
  }
  auto in = c.target(spec, 0);
  Totals got;
  while (auto b = in.consume(Clock::now() + std::chrono::seconds(60))) {
    for (const Rec& r : *b) {
      got.add(r);
      if (got.count == a.k) {  // where the test's launcher kills rank 1
        mark(c, a.k);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  if (in.status() != Status::kEndOfFlow) failed("consume: " + in.error());
  uint64_t sum = 0;
  for (uint64_t i = 0; i < a.n; ++i) sum += mix(i);
  if (got.count != a.n || got.sum != sum) {
    failed("rank " + std::to_string(c.rank()) + " got " + std::to_string(got.count) + " of " +
           std::to_string(a.n));
  }
  std::printf("VERIFIED rank %u got all %" PRIu64 " records\n", c.rank(), got.count);
  return 0;
}

// The README's pattern; the victim dies or stops mid-flow. Survivors print
// LOST with the time from the victim's end (announced through a file the
// victim writes just before) to their own report.
int readme(sluice::Cluster& c, const Args& a) {
  auto spec =
      sluice::shuffle<Rec>("orders").sources(c.all_ranks()).targets(c.all_ranks()).key(&Rec::key);
  auto flow = c.declare(spec);
  auto out = c.source(spec, 0);
  auto in = c.target(spec, 0);
  // Without a launcher ranks start at different times: the victim must not
  // end before the others are in the flow (that is a lost peer at declare).
  c.barrier("declared");
  const auto start = Clock::now();
  auto report = [&](const std::string& what, const std::string& error,
                    const std::optional<sluice::LostPeer>& peer) {
    report_lost(start, what, error, peer);
  };
  auto drain = [&] {
    while (auto b = in.try_consume()) {
    }
    if (in.status() == Status::kPeerLost) report("try_consume", in.error(), in.lost_peer());
  };
  for (uint64_t i = 0; i < a.n; ++i) {
    Status s;
    while ((s = out.try_push(Rec{mix(i + c.rank()), i})) == Status::kWouldBlock) drain();
    if (s == Status::kPeerLost) report("try_push", out.error(), out.lost_peer());
    if (s != Status::kOk) failed("try_push: " + out.error());
    // Everyone waits here a little so that a kill at the mark finds them
    // mid-flow: long enough for standalone_job.sh, which polls the log and
    // runs pkill, on a loaded machine (100 ms was not: the victim finished).
    if (i == a.k) {
      mark(c, a.k);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  Status s;
  while ((s = out.close(Clock::now())) == Status::kTimeout) drain();
  if (s == Status::kPeerLost) report("close", out.error(), out.lost_peer());
  while (auto b = in.consume()) {
  }
  if (in.status() == Status::kPeerLost) report("consume", in.error(), in.lost_peer());
  failed("rank " + std::to_string(c.rank()) + " finished without noticing the victim (" +
         sluice::to_string(in.status()) + ")");
}

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

// The README's pattern over a combiner flow, through a Worker: survivors
// must name the victim through the combiner ends' lost_peer().
int combiner(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::combiner<Rec>("sums")
                  .sources(c.all_ranks())
                  .targets(c.all_ranks())
                  .group_by(&Rec::key)
                  .sum(&Rec::value)
                  .local_groups(64)  // partials flow all the time
                  .segment_bytes(512);
  auto flow = c.declare(spec);
  sluice::Worker w;
  const sluice::Worker::InputId in = w.add(c.target(spec, 0), [](sluice::CombinerResult) {});
  auto out = c.source(spec, 0);
  c.barrier("declared");
  const auto start = Clock::now();
  auto check_input = [&] {
    if (w.status(in) == Status::kPeerLost)
      report_lost(start, "worker input", w.error(in), w.lost_peer(in), &w);
  };
  for (uint64_t i = 0; i < a.n; ++i) {
    const Status s = w.push(out, Rec{mix(i + c.rank()), i});
    if (s == Status::kPeerLost) report_lost(start, "push", out.error(), out.lost_peer(), &w);
    if (s != Status::kOk) failed("push: " + out.error());
    check_input();
    if (i == a.k) {
      mark(c, a.k);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const Status s = w.close(out);
  if (s == Status::kPeerLost) report_lost(start, "close", out.error(), out.lost_peer(), &w);
  if (s != Status::kOk) failed("close: " + out.error());
  check_input();
  if (w.run() == Status::kPeerLost) {
    report_lost(start, "run", w.error(w.reported()), w.lost_peer(w.reported()), &w);
  }
  failed("rank " + std::to_string(c.rank()) + " finished without noticing the victim");
}

int target_abort(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::shuffle<Rec>("ta")
                  .sources(c.ranks({0}))
                  .targets(c.ranks({1}))
                  .segment_bytes(256)
                  .ring_segments(4);
  auto flow = c.declare(spec);
  if (c.rank() == 1) {
    {
      auto in = c.target(spec, 0);
      uint64_t got = 0;
      while (got < a.k) {
        auto b = in.consume(Clock::now() + std::chrono::seconds(60));
        if (!b) failed("consume: " + in.error());
        got += b->size();
      }
      std::printf("TARGET destroyed after %" PRIu64 " records\n", got);
      std::fflush(stdout);
    }
    // Alive until rank 0 has learnt: only the abort can have told it.
    c.barrier("fault-learnt");
    return 0;
  }
  auto out = c.source(spec, 0);
  Clock::time_point start{};
  for (uint64_t i = 0;; ++i) {
    if (i == a.k) start = Clock::now();
    if (Status s = out.push(Rec{i, i}, Clock::now() + std::chrono::seconds(30)); s != Status::kOk) {
      if (s != Status::kPeerLost)
        failed(std::string("push: ") + sluice::to_string(s) + ": " + out.error());
      lost(start, out.error());
      c.barrier("fault-learnt");
      return 0;
    }
  }
}

int source_abort(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::shuffle<Rec>("sa").sources(c.ranks({0})).targets(c.ranks({1}));
  auto flow = c.declare(spec);
  if (c.rank() == 0) {
    {
      auto out = c.source(spec, 0);
      for (uint64_t i = 0; i < a.k; ++i) {
        if (out.push(Rec{i, i}) != Status::kOk) failed("push: " + out.error());
      }
      if (out.flush() != Status::kOk) failed("flush: " + out.error());
      if (a.abort) {
        out.abort();
        std::printf("SOURCE aborted\n");
        std::fflush(stdout);
        if (out.push(Rec{0, 0}) != Status::kClosed)
          failed("push after abort() is not kClosed: " + out.error());
        if (out.close() != Status::kClosed)
          failed("close after abort() is not kClosed: " + out.error());
        // The source lives on until the target has learnt: only the
        // abort can have told it.
        c.barrier("fault-learnt");
        return 0;
      }
      std::printf("SOURCE destroyed without close()\n");
      std::fflush(stdout);
    }
    c.barrier("fault-learnt");  // alive until the target has learnt
    return 0;
  }
  auto in = c.target(spec, 0);
  uint64_t got = 0;
  Clock::time_point start{};
  while (auto b = in.consume(Clock::now() + std::chrono::seconds(30))) {
    got += b->size();
    if (got == a.k) start = Clock::now();
  }
  if (in.status() != Status::kPeerLost)
    failed(std::string("consume: ") + sluice::to_string(in.status()) + ": " + in.error());
  if (got != a.k)
    failed("got " + std::to_string(got) + " of the " + std::to_string(a.k) + " records published");
  lost(start, in.error());
  c.barrier("fault-learnt");
  return 0;
}

// Item 8: rank 2, a source of the flow, sends its segments in the name of
// source 0 (run with SLUICE_TEST_OFI_IMPERSONATE=2:0; ofi only). The target
// must never deliver a record as another source's, nor report the flow
// complete; it reports kPeerLost instead.
int impersonate(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::shuffle<Rec>("impostor").sources(c.ranks({0, 2})).targets(c.ranks({1}));
  auto flow = c.declare(spec);
  if (c.rank() != 1) {
    auto out = c.source(spec, 0);
    for (uint64_t i = 0; i < a.k; ++i) {
      const Status s = out.push(Rec{c.rank(), i}, Clock::now() + std::chrono::seconds(30));
      if (s == Status::kPeerLost) break;
      if (s != Status::kOk) failed("push: " + out.error());
    }
    const Status s = out.close(Clock::now() + std::chrono::seconds(30));
    std::printf("SOURCE closed: %s\n", sluice::to_string(s));
    std::fflush(stdout);
    return 0;
  }
  auto in = c.target(spec, 0);
  const Clock::time_point start = Clock::now();
  Totals honest;  // source 0's records
  while (auto b = in.consume(Clock::now() + std::chrono::seconds(8))) {
    const uint32_t from = spec.spec().sources()[in.last_source()].rank;
    for (const Rec& r : *b) {
      if (r.key != from) {
        failed("a record of rank " + std::to_string(r.key) + " was delivered as a record of rank " +
               std::to_string(from));
      }
      if (from == 0) honest.add(r);
    }
  }
  if (in.status() == Status::kEndOfFlow)
    failed("the flow ended complete although a source spoke in another's name");
  if (in.status() == Status::kTimeout) {
    // Over RMA the forged completions name segments of source 0's ring that
    // source 0 wrote itself, and the impostor's own ring never completes:
    // source 0's records all arrive, the impostor's never end.
    Totals want;
    for (uint64_t i = 0; i < a.k; ++i) want.add(Rec{0, i});
    if (honest.count != want.count || honest.sum != want.sum) {
      failed("source 0: " + std::to_string(honest.count) + " records (want " +
             std::to_string(want.count) + ") or a wrong checksum");
    }
  } else if (in.status() != Status::kPeerLost) {
    failed(std::string("consume: ") + sluice::to_string(in.status()) + ": " + in.error());
  }
  const auto peer = in.lost_peer();
  lost(start, in.error() + " [lost_peer " +
                  (peer ? std::to_string(peer->rank) : std::string("none")) + "]");
  return 0;
}

int slow_target(sluice::Cluster& c, const Args& a) {
  auto spec = sluice::shuffle<Rec>("slow").sources(c.ranks({0})).targets(c.ranks({1}));
  auto flow = c.declare(spec);
  Totals got;
  if (c.rank() == 0) {
    {
      auto out = c.source(spec, 0);
      for (uint64_t i = 0; i < a.n; ++i) {
        if (out.push(Rec{i, i}) != Status::kOk) failed("push: " + out.error());
      }
      if (out.close() != Status::kOk) failed("close: " + out.error());
    }
    // The source is gone, the process stays: what the target still lacks
    // must reach it all the same.
    std::printf("SOURCE closed and destroyed\n");
    std::fflush(stdout);
  } else {
    auto in = c.target(spec, 0);
    while (auto b = in.consume(Clock::now() + std::chrono::seconds(30))) {
      for (const Rec& r : *b) got.add(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (in.status() != Status::kEndOfFlow) {
      failed("consume after " + std::to_string(got.count) + " of " + std::to_string(a.n) +
             " records: " + sluice::to_string(in.status()) + ": " + in.error());
    }
  }
  check_totals(c, got, a.n, expected_sum(1, a.n));
  return 0;
}

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

}  // namespace

int main(int argc, char** argv) {
  Args a;
  sluice::testing::JobArgs(argc, argv)
      .value("--scenario", &a.scenario)
      .value("--n", &a.n)
      .value("--k", &a.k)
      .value("--victim", &a.victim)
      .flag("--try", &a.try_mode)
      .flag("--latency", &a.latency)
      .value("--fault", &a.fault)
      .flag("--ordered", &a.ordered)
      .flag("--abort", &a.abort)
      .parse();
  try {
    if (a.scenario == "transport-mismatch") {
      // Rank 1 pins ofi, rank 0 lets sluice choose (shm on one host): the
      // two would wire their pair differently, so declare must refuse.
      auto o = sluice::ClusterOptions::from_env();
      o.transport =
          std::getenv("SLUICE_RANK") != nullptr && std::string(std::getenv("SLUICE_RANK")) == "1"
              ? sluice::Transport::kOfi
              : sluice::Transport::kAuto;
      auto c = sluice::Cluster::join(o);
      auto spec = sluice::shuffle<Rec>("tm").sources(c.all_ranks()).targets(c.all_ranks());
      try {
        auto flow = c.declare(spec);
      } catch (const sluice::Error& e) {
        std::printf("REFUSED %s: %s\n", sluice::to_string(e.code()), e.what());
        return 0;
      }
      failed("declare accepted ranks that disagree on the transport");
    }
    auto c = sluice::Cluster::join();
    if (a.scenario == "type-mismatch") {
      // Two record types of the same size and alignment: declare must see
      // that they are different types.
      struct Other {
        double price;
        uint64_t id;
      };
      try {
        if (c.rank() == 0) {
          auto flow =
              c.declare(sluice::shuffle<Rec>("tt").sources(c.all_ranks()).targets(c.all_ranks()));
        } else {
          auto flow =
              c.declare(sluice::shuffle<Other>("tt").sources(c.all_ranks()).targets(c.all_ranks()));
        }
      } catch (const sluice::Error& e) {
        std::printf("REFUSED %s: %s\n", sluice::to_string(e.code()), e.what());
        return 0;
      }
      failed("declare accepted ranks whose record types differ");
    }
    if (a.scenario == "declare-twice") {
      // Rank 0 declares a flow twice, which throws, and exits at once; rank
      // 1 declares it a little later and must learn that rank 0 is lost.
      auto spec = sluice::shuffle<Rec>("dup").sources(c.all_ranks()).targets(c.all_ranks());
      if (c.rank() == 0) {
        auto flow = c.declare(spec);
        try {
          auto again = c.declare(spec);
        } catch (const sluice::Error& e) {
          std::printf("DUPLICATE refused: %s\n", e.what());
          std::fflush(stdout);
          std::_Exit(1);
        }
        failed("a second declare of one name was accepted");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(a.k));
      // Either declare meets rank 0 before it exits (then the flow sees its
      // source lost) or after (then declare throws PeerLostError); never a
      // resource error about the memory of a process that has exited.
      auto flow = c.declare(spec);
      auto in = c.target(spec, 0);
      const auto start = Clock::now();
      while (in.consume(Clock::now() + std::chrono::seconds(30))) {
      }
      if (in.status() != Status::kPeerLost)
        failed(std::string("consume: ") + sluice::to_string(in.status()));
      lost(start, "consume: " + in.error());
      return 3;
    }
    if (a.scenario == "sequencer-lost") {
      // The sequencer lives on rank 0, a target only; it dies mid-flow. The
      // sources (ranks 1, 2) must fail alike on shm and ofi: no more numbers.
      auto spec = sluice::replicate<Rec>("seq")
                      .sources(c.ranks({1, 2}))
                      .targets(c.all_ranks())
                      .segment_bytes(256)
                      .ordered();
      auto flow = c.declare(spec);
      auto in = c.target(spec, 0);
      if (c.rank() == 0) {
        uint64_t got = 0;
        while (got < a.k) {
          auto b = in.consume(Clock::now() + std::chrono::seconds(60));
          if (!b) failed("consume: " + in.error());
          got += b->size();
        }
        // The test's launcher kills this rank here; until then it consumes
        // (the sources push until they learn of the loss).
        mark(c, a.k);
        while (in.consume(Clock::now() + std::chrono::seconds(60))) {
        }
        failed("rank 0's flow ended (" + std::string(sluice::to_string(in.status())) +
               ") before the launcher killed it");
      }
      auto out = c.source(spec, 0);
      const auto start = Clock::now();
      for (uint64_t i = 0;; ++i) {
        Status s;
        while ((s = out.try_push(Rec{i, i})) == Status::kWouldBlock) {
          while (in.try_consume()) {
          }
        }
        if (s == Status::kPeerLost) {
          lost(start, "try_push: " + out.error());
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return 3;
        }
        if (s != Status::kOk) failed("try_push: " + out.error());
        while (in.try_consume()) {
        }
        if (Clock::now() - start > std::chrono::seconds(60))
          failed("pushed for a minute without noticing");
      }
    }
    if (a.scenario == "close-wait") {
      // close_and_wait(): returns once the transport reports every segment
      // delivered, so the source's process may exit at once.
      auto spec = sluice::shuffle<Rec>("cw").sources(c.ranks({0})).targets(c.ranks({1}));
      auto flow = c.declare(spec);
      if (c.rank() == 0) {
        auto out = c.source(spec, 0);
        for (uint64_t i = 0; i < a.n; ++i) {
          if (out.push(Rec{i, i}) != Status::kOk) failed("push: " + out.error());
        }
        const Status s = out.close_and_wait(Clock::now() + std::chrono::seconds(30));
        if (s != Status::kOk)
          failed(std::string("close_and_wait: ") + sluice::to_string(s) + ": " + out.error());
        std::printf("DELIVERED %" PRIu64 "\n", a.n);
        std::fflush(stdout);
        std::_Exit(0);  // no destructor, no linger: what was delivered stays delivered
      }
      auto in = c.target(spec, 0);
      Totals got;
      while (auto b = in.consume(Clock::now() + std::chrono::seconds(60))) {
        for (const Rec& r : *b) got.add(r);
      }
      if (in.status() != Status::kEndOfFlow) failed("consume: " + in.error());
      uint64_t sum = 0;
      for (uint64_t i = 0; i < a.n; ++i) sum += mix(i);
      if (got.count != a.n || got.sum != sum)
        failed("got " + std::to_string(got.count) + " of " + std::to_string(a.n));
      std::printf("VERIFIED %" PRIu64 " records\n", got.count);
      return 0;
    }
    if (a.scenario == "single-thread") return sluice::testing::leave_after(c, single_thread(c, a));
    if (a.scenario == "worker-lost-target")
      return sluice::testing::leave_after(c, worker_lost_target(c, a));
    if (a.scenario == "replicate-lead")
      return sluice::testing::leave_after(c, replicate_lead(c, a));
    if (a.scenario == "readme") return sluice::testing::leave_after(c, readme(c, a));
    if (a.scenario == "target-abort") return sluice::testing::leave_after(c, target_abort(c, a));
    if (a.scenario == "source-abort") return sluice::testing::leave_after(c, source_abort(c, a));
    if (a.scenario == "ordered-idle") return sluice::testing::leave_after(c, ordered_idle(c, a));
    if (a.scenario == "slow-target") return sluice::testing::leave_after(c, slow_target(c, a));
    if (a.scenario == "impersonate") return sluice::testing::leave_after(c, impersonate(c, a));
    if (a.scenario == "soak") return sluice::testing::leave_after(c, soak(c, a));
    if (a.scenario == "combiner") return sluice::testing::leave_after(c, combiner(c, a));
    if (a.scenario == "rebuild") return sluice::testing::leave_after(c, rebuild(c, a));
    if (a.scenario == "rejoin") return sluice::testing::leave_after(c, rejoin(c, a));
    if (a.scenario == "fence")
      return sluice::testing::leave_after(c, sluice::testing::region_fence(c, a.k, mark));
    if (a.scenario == "flow-fence") {
      return sluice::testing::leave_after(c, sluice::testing::flow_fence(c, a.k, a.ordered, mark));
    }
    failed("unknown scenario '" + a.scenario + "'");
  } catch (const sluice::PeerLostError& e) {
    lost(Clock::now(), std::string("exception: ") + e.what());
    // Stay a moment, as report() does, so that others see the first loss.
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    std::_Exit(3);
  } catch (const std::exception& e) {
    failed(e.what());
  }
}
