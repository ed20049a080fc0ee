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
#include "fault_worker.h"

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

using fault_worker::Args;
using fault_worker::check_totals;
using fault_worker::expected_sum;
using fault_worker::failed;
using fault_worker::lost;
using fault_worker::mark;
using fault_worker::mix;
using fault_worker::ms_since;
using fault_worker::Rec;
using fault_worker::report_lost;
using fault_worker::Totals;
using sluice::Clock;
using sluice::Status;

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
    if (a.scenario == "ordered-idle")
      return sluice::testing::leave_after(c, fault_worker::ordered_idle(c, a));
    if (a.scenario == "slow-target") return sluice::testing::leave_after(c, slow_target(c, a));
    if (a.scenario == "impersonate") return sluice::testing::leave_after(c, impersonate(c, a));
    if (a.scenario == "soak") return sluice::testing::leave_after(c, fault_worker::soak(c, a));
    if (a.scenario == "combiner") return sluice::testing::leave_after(c, combiner(c, a));
    if (a.scenario == "rebuild")
      return sluice::testing::leave_after(c, fault_worker::rebuild(c, a));
    if (a.scenario == "rejoin") return sluice::testing::leave_after(c, fault_worker::rejoin(c, a));
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
