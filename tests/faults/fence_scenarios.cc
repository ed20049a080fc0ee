// The fencing scenarios of the fault worker (fence_scenarios.h). Each
// prints the lines faults_test.cc's FenceTest checks.
#include "fence_scenarios.h"

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "support/job_args.h"

namespace sluice::testing {
namespace {

[[noreturn]] void failed(const std::string& what) { std::_Exit(fail(what)); }

int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// The first rank missing from view `v` of a job of `n` ranks.
uint32_t first_gone(const View& v, uint32_t n) {
  uint32_t gone = 0;
  while (gone < n && v.contains(gone)) ++gone;
  if (gone == n) failed("the view after epoch 0 holds every rank");
  return gone;
}

// The survivors' end: they agree on a view of all ranks but the lost one.
void agree_without_one(Cluster& c, const std::string& name) {
  const Gathered g = c.agree(name, "", Clock::now() + std::chrono::seconds(30));
  if (g.ranks.size() + 1 != c.world_size())
    failed("the agreed view has " + std::to_string(g.ranks.size()) + " ranks");
}

}  // namespace

// Regions: ranks 1.. write rising numbers, one at a
// time, into their own word of rank 0's region "fence" (shm: one host),
// each printing its mark after K writes; a writer is stopped from outside,
// unannounced (standalone_job.sh). Rank 0 waits for the view without it,
// reads its word at once and keeps reading it for 3 s, while the stopped
// process is resumed (standalone_job.sh's RESUME_AT): a word that moves
// after the view was written by a process the survivors had given up on.
// Writers stop once they see the view move; the survivors agree and end.
int region_fence(Cluster& c, uint64_t k, void (*mark)(const Cluster&, uint64_t)) {
  const uint32_t n = c.world_size();
  std::optional<MemoryRegion> mine;
  if (c.rank() == 0) mine.emplace(c.expose("fence", 8 * n));
  c.barrier("exposed");
  if (c.rank() == 0) {
    if (!c.await_view(0, Clock::now() + std::chrono::seconds(60)))
      failed("no rank was lost within 60 s");
    const View v = c.view();
    const uint32_t gone = first_gone(v, n);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(mine->data());
    const uint64_t at_view = words[gone].load(std::memory_order_acquire);
    std::printf("VIEW %" PRIu64 " without rank %u: its word is %" PRIu64 "\n", v.epoch, gone,
                at_view);
    std::fflush(stdout);
    uint64_t now = at_view;
    for (const auto until = Clock::now() + std::chrono::seconds(3); Clock::now() < until;) {
      if ((now = words[gone].load(std::memory_order_acquire)) != at_view) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (now != at_view) {
      std::printf("FENCE BROKEN: rank %u's word moved from %" PRIu64 " to %" PRIu64
                  " after the view\n",
                  gone, at_view, now);
    } else {
      std::printf("WORD HELD: rank %u's word stayed %" PRIu64 " for 3 s after the view\n", gone,
                  at_view);
    }
    std::fflush(stdout);
  } else {
    RemoteRegion r = c.open_region("fence", 0, Clock::now() + std::chrono::seconds(30));
    for (uint64_t i = 1; c.epoch() == 0; ++i) {
      const Status s = r.write(8 * c.rank(), std::as_bytes(std::span(&i, 1)));
      if (s != Status::kOk) failed("write: " + r.error());
      if (i == k) mark(c, k);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  agree_without_one(c, "fence-done");
  return 0;
}

namespace {

// A record of flow_fence: who pushed it, its number there (1, 2, ...) and
// the steady clock (one per machine: every rank of the test runs here) when
// it was pushed.
struct Stamped {
  uint64_t rank;
  uint64_t i;
  int64_t pushed_ns;
};

// Rank 0: takes K records of every source (but kSlack: record K of the
// rank stopped at its mark could still be on its way), then nothing more
// until it is in the view without a rank (a target that looked meanwhile would find
// the source lost and, unordered, end), notes the time, says so (the
// script resumes the stopped rank) and waits 1 s more: what the resumed
// process sends arrives meanwhile. Then it drains the flow to its end.
// Every source's records must come in order, once each, a prefix of what
// it pushed (all of it for the survivors of an ordered flow); none of the
// lost rank's may have been pushed after the view.
template <class Spec>
int fence_target(Cluster& c, const Spec& spec, uint64_t k, uint64_t n, bool ordered) {
  const uint32_t world = c.world_size();
  auto in = c.target(spec, 0);
  std::vector<uint64_t> got(world, 0);
  int64_t view_ns = 0;
  uint32_t gone = world;
  uint64_t after_view = 0, pushed_after = 0, gaps = 0;
  int64_t latest_before = 0, first_after = 0;
  // Fewer than the ring's segments: every source still reaches its mark.
  constexpr uint64_t kSlack = 4;
  auto each_has_k = [&] {
    for (uint32_t r = 1; r < world; ++r) {
      if (got[r] + kSlack < k) return false;
    }
    return true;
  };
  for (;;) {
    if (view_ns == 0 && each_has_k()) {
      if (!c.await_view(0, Clock::now() + std::chrono::seconds(60)))
        failed("no rank was lost within 60 s");
      view_ns = now_ns();
      const View v = c.view();
      gone = first_gone(v, world);
      std::printf("VIEW %" PRIu64 " without rank %u: %" PRIu64 " of its records delivered\n",
                  v.epoch, gone, got[gone]);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    auto b = in.consume(Clock::now() + std::chrono::seconds(30));
    if (!b && in.status() == Status::kGap) {
      ++gaps;  // a number the lost source took, its segment never delivered
      continue;
    }
    if (!b) break;
    for (const Stamped& r : *b) {
      if (r.rank == 0 || r.rank >= world || r.i != got[r.rank] + 1)
        failed("record " + std::to_string(r.i) + " of rank " + std::to_string(r.rank) + " after " +
               std::to_string(r.rank < world ? got[r.rank] : 0) + " of its records");
      ++got[r.rank];
      if (r.rank != gone || view_ns == 0) continue;
      ++after_view;
      if (r.pushed_ns > view_ns) {
        if (pushed_after++ == 0) first_after = r.pushed_ns - view_ns;
      } else {
        latest_before = std::max(latest_before, r.pushed_ns);
      }
    }
  }
  if (view_ns == 0) failed("the flow ended in view 0: " + in.error());
  if (pushed_after != 0) {
    std::printf("FENCE BROKEN: %" PRIu64
                " records rank %u pushed after the view were delivered "
                "(the first pushed %.1f ms after it)\n",
                pushed_after, gone, first_after / 1e6);
  } else {
    std::printf("FLOW HELD: %" PRIu64
                " of rank %u's records delivered after the view, all "
                "pushed before it (the last %.1f ms before); %" PRIu64 " in all; %" PRIu64
                " gaps; the flow ended: %s\n",
                after_view, gone, latest_before == 0 ? 0.0 : (view_ns - latest_before) / 1e6,
                got[gone], gaps, to_string(in.status()));
  }
  std::fflush(stdout);
  // An ordered target goes on without a lost source (and names it at the
  // end); an unordered one ends once it has drained what the lost source
  // had sent.
  if (in.status() != Status::kPeerLost || !in.lost_peer() || in.lost_peer()->rank != gone)
    failed("consume: " + std::string(to_string(in.status())) + ": " + in.error());
  if (ordered) {
    for (uint32_t r = 1; r < world; ++r) {
      if (r != gone && got[r] != n)
        failed("rank " + std::to_string(r) + ": " + std::to_string(got[r]) + " of " +
               std::to_string(n) + " records delivered");
    }
  }
  return 0;
}

// Ranks 1..: push n stamped records, one segment each (a flush), rank 2's
// mark after k, until a push fails (an unordered target ends once it has
// drained the lost source; the stopped process, resumed, finds out it is
// lost).
template <class Spec>
int fence_source(Cluster& c, const Spec& spec, uint64_t k, uint64_t n,
                 void (*mark)(const Cluster&, uint64_t)) {
  auto out = c.source(spec, 0);
  for (uint64_t i = 1; i <= n; ++i) {
    Status s = out.push(Stamped{c.rank(), i, now_ns()});
    if (s == Status::kOk) s = out.flush();
    if (s != Status::kOk) {
      std::printf("PUSH ENDED at record %" PRIu64 ": %s: %s\n", i, to_string(s),
                  out.error().c_str());
      std::fflush(stdout);
      return 0;
    }
    if (i == k) mark(c, k);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const Status s = out.close(Clock::now() + std::chrono::seconds(30));
  if (s != Status::kOk) failed("close: " + out.error());
  return 0;
}

template <class Spec>
int run_flow_fence(Cluster& c, const Spec& spec, uint64_t k, uint64_t n, bool ordered,
                   void (*mark)(const Cluster&, uint64_t)) {
  auto flow = c.declare(spec);
  const int rc =
      c.rank() == 0 ? fence_target(c, spec, k, n, ordered) : fence_source(c, spec, k, n, mark);
  agree_without_one(c, "flow-fence-done");
  return rc;
}

}  // namespace

// Flows: the same stop and resume for a flow's rings (and an ordered flow's
// sequencer). Over ofi a lost process on another host is beyond a kill: the
// target refuses every arrival from it once the view without it is seen.
int flow_fence(Cluster& c, uint64_t k, bool ordered, void (*mark)(const Cluster&, uint64_t)) {
  const uint64_t n = k + 4000;  // rank 2 has more to push when it is resumed
  std::vector<uint32_t> sources;
  for (uint32_t r = 1; r < c.world_size(); ++r) sources.push_back(r);
  if (ordered) {
    auto spec = replicate<Stamped>("flow-fence")
                    .sources(c.ranks(sources))
                    .targets(c.ranks({0}))
                    .segment_bytes(64)
                    .ring_segments(8)  // more than fence_target's kSlack
                    .ordered()
                    .gap_timeout(std::chrono::milliseconds(500));
    return run_flow_fence(c, spec, k, n, ordered, mark);
  }
  auto spec = shuffle<Stamped>("flow-fence")
                  .sources(c.ranks(sources))
                  .targets(c.ranks({0}))
                  .segment_bytes(64)
                  .ring_segments(8);
  return run_flow_fence(c, spec, k, n, ordered, mark);
}

}  // namespace sluice::testing
