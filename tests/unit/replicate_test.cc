// Replicate flows on the in-process shm wiring: every target gets every
// record once, try_push is all-or-nothing, and ordered flows hand out one
// global order and report gaps. Multi-process runs are in tests/system.
#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "sluice/flow.h"
#include "sluice/worker.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

struct Stamped {
  uint64_t source;
  uint64_t value;
};

ReplicateSpec<Stamped> small_spec(uint32_t sources, uint32_t targets, bool ordered = false) {
  return replicate<Stamped>("rep")
      .sources(testing::slots(sources))
      .targets(testing::slots(targets))
      .segment_bytes(72)
      .ring_segments(4)
      .ordered(ordered)
      .gap_timeout(std::chrono::milliseconds(50));
}

// Per target: every (source, value) exactly once and per-source FIFO.
TEST(ReplicateFlowTest, EveryTargetConsumesEveryRecordOfEverySourceOnce) {
  constexpr uint32_t kSources = 3, kTargets = 3;
  constexpr uint64_t kPerSource = 5000;
  auto spec = small_spec(kSources, kTargets);
  testing::LocalFlow flow(spec.spec());
  std::vector<std::thread> threads;
  std::vector<std::vector<uint64_t>> next(kTargets, std::vector<uint64_t>(kSources, 0));
  std::vector<Status> end(kTargets);
  for (uint32_t t = 0; t < kTargets; ++t) {
    threads.emplace_back([&, t, in = flow.target<Stamped>(t)]() mutable {
      while (auto batch = in.consume()) {
        for (const Stamped& r : *batch) {
          ASSERT_LT(r.source, kSources);
          ASSERT_EQ(r.value, next[t][r.source]) << "target " << t;
          ++next[t][r.source];
        }
      }
      end[t] = in.status();
    });
  }
  for (uint32_t s = 0; s < kSources; ++s) {
    threads.emplace_back([&, s, out = flow.source<Stamped>(s)]() mutable {
      for (uint64_t v = 0; v < kPerSource; ++v) ASSERT_EQ(out.push(Stamped{s, v}), Status::kOk);
      ASSERT_EQ(out.close(), Status::kOk);
    });
  }
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < kTargets; ++t) {
    EXPECT_EQ(end[t], Status::kEndOfFlow);
    for (uint32_t s = 0; s < kSources; ++s) EXPECT_EQ(next[t][s], kPerSource);
  }
}

TEST(ReplicateFlowTest, TryPushIsAllOrNothingWhenOneTargetIsFull) {
  auto spec = small_spec(1, 2);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Stamped>(0);
  auto fast = flow.target<Stamped>(0);
  auto slow = flow.target<Stamped>(1);
  uint64_t pushed = 0;
  Status s;
  // Target 0 keeps consuming, target 1 never does: its ring fills.
  while ((s = out.try_push(Stamped{0, pushed})) == Status::kOk) {
    ++pushed;
    while (fast.try_consume()) {
    }
  }
  EXPECT_EQ(s, Status::kWouldBlock);
  EXPECT_EQ(out.push_to(0, Stamped{}), Status::kInvalid);  // no push_to on replicate flows
  // Everything pushed reaches both; the refused record reached neither.
  std::thread drain([&] {
    uint64_t n = 0;
    while (auto b = slow.consume()) {
      for (const Stamped& r : *b) EXPECT_EQ(r.value, n++);
    }
    EXPECT_EQ(n, pushed);
    EXPECT_EQ(slow.status(), Status::kEndOfFlow);
  });
  ASSERT_EQ(out.close(), Status::kOk);
  uint64_t n = 0;
  while (auto b = fast.consume()) n += b->size();
  drain.join();
  EXPECT_EQ(fast.status(), Status::kEndOfFlow);
  EXPECT_GE(pushed, 1u);
}

TEST(ReplicateFlowTest, BytesRecordsReachEveryTarget) {
  auto spec = replicate<Bytes>("bytes")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .segment_bytes(256);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Bytes>(0);
  for (uint32_t i = 0; i < 100; ++i) {
    std::vector<std::byte> rec(i % 40, std::byte{static_cast<unsigned char>(i)});
    ASSERT_EQ(out.push(rec), Status::kOk);
  }
  ASSERT_EQ(out.close(), Status::kOk);
  for (uint32_t t = 0; t < 2; ++t) {
    auto in = flow.target<Bytes>(t);
    uint32_t i = 0;
    while (auto b = in.consume()) {
      for (auto rec : *b) {
        ASSERT_EQ(rec.size(), i % 40);
        for (std::byte x : rec) ASSERT_EQ(x, std::byte{static_cast<unsigned char>(i)});
        ++i;
      }
    }
    EXPECT_EQ(i, 100u);
    EXPECT_EQ(in.status(), Status::kEndOfFlow);
  }
}

// Every target sees the same sequence of (source, value), batch numbers
// strictly increasing from 0 with no holes.
TEST(ReplicateFlowTest, OrderedFlowGivesEveryTargetTheSameSequence) {
  constexpr uint32_t kSources = 3, kTargets = 3;
  constexpr uint64_t kPerSource = 4000;
  auto spec = small_spec(kSources, kTargets, true);
  testing::LocalFlow flow(spec.spec());
  std::vector<std::vector<Stamped>> seen(kTargets);
  std::vector<Status> end(kTargets);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kTargets; ++t) {
    threads.emplace_back([&, t, in = flow.target<Stamped>(t)]() mutable {
      uint64_t expect = 0;
      while (auto batch = in.consume()) {
        ASSERT_EQ(in.last_sequence(), expect++);
        seen[t].insert(seen[t].end(), batch->begin(), batch->end());
      }
      end[t] = in.status();
    });
  }
  for (uint32_t s = 0; s < kSources; ++s) {
    threads.emplace_back([&, s, out = flow.source<Stamped>(s)]() mutable {
      for (uint64_t v = 0; v < kPerSource; ++v) {
        ASSERT_EQ(out.push(Stamped{s, v}), Status::kOk);
        if (v % 7 == 0) {
          ASSERT_EQ(out.flush(), Status::kOk);
        }
      }
      ASSERT_EQ(out.close(), Status::kOk);
    });
  }
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < kTargets; ++t) {
    EXPECT_EQ(end[t], Status::kEndOfFlow);
    ASSERT_EQ(seen[t].size(), kSources * kPerSource);
    for (size_t i = 0; i < seen[t].size(); ++i) {
      ASSERT_EQ(seen[t][i].source, seen[0][i].source) << "target " << t << " position " << i;
      ASSERT_EQ(seen[t][i].value, seen[0][i].value) << "target " << t << " position " << i;
    }
  }
}

// A number taken and never published (its source died in between) is
// reported as a gap, after which consuming goes on in order; numbers taken
// by a source that is gone when the rest end are gaps too.
TEST(ReplicateFlowTest, OrderedFlowReportsANumberThatNeverArrivesAsAGap) {
  auto spec = small_spec(2, 2, true);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Stamped>(0);
  {
    auto doomed = flow.source<Stamped>(1);  // destroyed without close(): lost
    ASSERT_EQ(out.push(Stamped{0, 1}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);   // number 0
    flow.sequence_counter().fetch_add(1);  // number 1: taken by the doomed source, never published
    ASSERT_EQ(out.push(Stamped{0, 2}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);   // number 2
    flow.sequence_counter().fetch_add(1);  // number 3: the last one taken, never published
  }
  ASSERT_EQ(out.close(), Status::kOk);
  for (uint32_t t = 0; t < 2; ++t) {
    auto in = flow.target<Stamped>(t);
    auto b = in.consume();
    ASSERT_TRUE(b);
    EXPECT_EQ(in.last_sequence(), 0u);
    EXPECT_FALSE(in.consume());
    ASSERT_EQ(in.status(), Status::kGap) << in.error();
    EXPECT_EQ(in.gap(), 1u);
    EXPECT_NE(in.error().find("sequence number 1 never arrived"), std::string::npos) << in.error();
    b = in.consume();
    ASSERT_TRUE(b);
    EXPECT_EQ(in.last_sequence(), 2u);
    EXPECT_EQ((*b)[0].value, 2u);
    EXPECT_FALSE(in.consume());
    ASSERT_EQ(in.status(), Status::kGap);
    EXPECT_EQ(in.gap(), 3u);
    EXPECT_FALSE(in.consume());
    EXPECT_EQ(in.status(), Status::kPeerLost);
    EXPECT_NE(in.error().find("source (0,1)"), std::string::npos) << in.error();
  }
}

// Numbers a lost source took at once (an ofi source numbers a run of
// segments with one fetch-and-add) are gaps in a row: the first after the
// gap timeout, each next one at once, since it was known taken when the
// stall began. A number taken after the stall gets a whole timeout again.
TEST(ReplicateFlowTest, ARunOfNumbersOfALostSourceCostsOneGapTimeout) {
  auto spec = small_spec(2, 1, true).gap_timeout(std::chrono::milliseconds(1500));
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Stamped>(0);
  {
    auto doomed = flow.source<Stamped>(1);  // destroyed without close(): lost
    ASSERT_EQ(out.push(Stamped{0, 1}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);   // number 0
    flow.sequence_counter().fetch_add(3);  // numbers 1-3: the doomed source's run
    ASSERT_EQ(out.push(Stamped{0, 2}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);  // number 4
  }
  auto in = flow.target<Stamped>(0);
  ASSERT_TRUE(in.consume());
  EXPECT_EQ(in.last_sequence(), 0u);
  EXPECT_FALSE(in.consume());  // waits the gap timeout
  ASSERT_EQ(in.status(), Status::kGap) << in.error();
  EXPECT_EQ(in.gap(), 1u);
  for (uint64_t n : {2u, 3u}) {
    // At once, not after another 1.5 s (the deadline is a second).
    EXPECT_FALSE(in.consume(Clock::now() + std::chrono::seconds(1)));
    ASSERT_EQ(in.status(), Status::kGap) << "number " << n << ": " << in.error();
    EXPECT_EQ(in.gap(), n);
  }
  auto b = in.consume();
  ASSERT_TRUE(b);
  EXPECT_EQ(in.last_sequence(), 4u);
  EXPECT_EQ((*b)[0].value, 2u);
  // Number 5, taken now by a live source that has not published it yet:
  // not a gap before its own timeout.
  flow.sequence_counter().fetch_add(1);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::milliseconds(300)));
  EXPECT_EQ(in.status(), Status::kTimeout) << in.error();
  ASSERT_EQ(out.push(Stamped{0, 3}), Status::kOk);
  ASSERT_EQ(out.close(), Status::kOk);  // its segment is number 6
  EXPECT_FALSE(in.consume());
  ASSERT_EQ(in.status(), Status::kGap) << in.error();
  EXPECT_EQ(in.gap(), 5u);
  b = in.consume();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].value, 3u);
}

// The same run polled with try_consume (a Worker's way), while another
// source is open with nothing sent, so no ring says the run was skipped:
// after the first gap, each poll reports the next number of the run. (Each
// once waited for the target's next liveness check, one per Worker park.)
TEST(ReplicateFlowTest, APolledRunOfNumbersOfALostSourceGoesAGapPerPollAfterTheFirst) {
  auto spec = small_spec(3, 1, true).gap_timeout(std::chrono::milliseconds(200));
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Stamped>(0);
  auto quiet = flow.source<Stamped>(2);  // open, sends nothing until the end
  {
    auto doomed = flow.source<Stamped>(1);  // destroyed without close(): lost
    ASSERT_EQ(out.push(Stamped{0, 1}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);   // number 0
    flow.sequence_counter().fetch_add(5);  // numbers 1-5: the doomed source's run
    ASSERT_EQ(out.push(Stamped{0, 2}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);  // number 6
  }
  auto in = flow.target<Stamped>(0);
  ASSERT_TRUE(in.consume());
  EXPECT_EQ(in.last_sequence(), 0u);
  // Number 1 after the gap timeout (polled, as a Worker does).
  while (!in.try_consume() && in.status() == Status::kWouldBlock) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(in.status(), Status::kGap) << in.error();
  EXPECT_EQ(in.gap(), 1u);
  for (uint64_t n = 2; n <= 5; ++n) {
    EXPECT_FALSE(in.try_consume());
    ASSERT_EQ(in.status(), Status::kGap) << "number " << n << ": " << in.error();
    EXPECT_EQ(in.gap(), n);
  }
  auto b = in.try_consume();
  ASSERT_TRUE(b) << in.error();
  EXPECT_EQ(in.last_sequence(), 6u);
  EXPECT_EQ((*b)[0].value, 2u);
  ASSERT_EQ(out.close(), Status::kOk);
  ASSERT_EQ(quiet.close(), Status::kOk);
}

// Once a source is lost, a number below the head of every open ring is a
// gap at once: numbers only grow along a ring, so no open source holds it
// (a lost process's segments refused after the fence leave such numbers
// between a live source's, each of which cost a whole gap timeout before).
// While the other source is open it may still publish the number: no gap.
TEST(ReplicateFlowTest, ANumberBelowEveryOpenRingIsAGapAtOnceOnceItsSourceIsLost) {
  auto spec = small_spec(2, 1, true).gap_timeout(std::chrono::seconds(60));
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Stamped>(0);
  auto in = flow.target<Stamped>(0);
  std::optional<Source<Stamped>> other(flow.source<Stamped>(1));
  ASSERT_EQ(out.push(Stamped{0, 1}), Status::kOk);
  ASSERT_EQ(out.flush(), Status::kOk);   // number 0
  flow.sequence_counter().fetch_add(1);  // number 1: the other source's, not published
  ASSERT_EQ(out.push(Stamped{0, 2}), Status::kOk);
  ASSERT_EQ(out.flush(), Status::kOk);  // number 2
  ASSERT_TRUE(in.consume());
  EXPECT_EQ(in.last_sequence(), 0u);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::milliseconds(300)));
  EXPECT_EQ(in.status(), Status::kTimeout) << in.error();
  other.reset();  // destroyed without close(): lost
  // At once, not after the 60 s gap timeout (the deadline is 10 s).
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::seconds(10)));
  ASSERT_EQ(in.status(), Status::kGap) << in.error();
  EXPECT_EQ(in.gap(), 1u);
  EXPECT_NE(in.error().find("sequence number 1 never arrived: a lost source took it"),
            std::string::npos)
      << in.error();
  auto b = in.consume();
  ASSERT_TRUE(b);
  EXPECT_EQ(in.last_sequence(), 2u);
  EXPECT_EQ((*b)[0].value, 2u);
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kPeerLost) << in.error();
}

// One source, two targets, one record per segment, 4-segment rings; a
// target full for 20 ms is skipped.
ReplicateSpec<Stamped> skipping_spec() {
  return small_spec(1, 2, true)
      .optimize(Optimize::kLatency)
      .skip_full_targets_after(std::chrono::milliseconds(20));
}

// skip_full_targets_after: once target 1 (which takes nothing) has had no
// room for the limit, it misses segments and target 0 gets every record at
// once, in order; at the end target 1 gets what reached it, then each
// number it missed as a gap (its sources ended past them), then the end.
// Without the option, the push after a full ring waits (try_push: kWouldBlock).
TEST(ReplicateFlowTest, AFullTargetMissesSegmentsAndSeesEachAsAGapWhenTheFlowSkipsIt) {
  constexpr uint64_t kRecords = 20;
  {
    auto waits = small_spec(1, 2, true).optimize(Optimize::kLatency);
    testing::LocalFlow flow(waits.spec());
    auto out = flow.source<Stamped>(0);
    for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(out.try_push(Stamped{0, i}), Status::kOk);
    EXPECT_EQ(out.try_push(Stamped{0, 4}), Status::kWouldBlock);  // target 1's ring is full
    out.abort();
  }
  testing::LocalFlow flow(skipping_spec().spec());
  auto out = flow.source<Stamped>(0);
  auto in0 = flow.target<Stamped>(0);
  for (uint64_t i = 0; i < kRecords; ++i) {
    ASSERT_EQ(out.push(Stamped{0, i}), Status::kOk) << out.error();
    auto b = in0.consume();
    ASSERT_TRUE(b) << in0.error();
    ASSERT_EQ(b->size(), 1u);
    EXPECT_EQ((*b)[0].value, i);
    EXPECT_EQ(in0.last_sequence(), i);
  }
  // close() waits for target 1's room for the END: consumed below.
  Status closed = Status::kInvalid;
  std::thread closer([&] { closed = out.close(); });
  auto in1 = flow.target<Stamped>(1);
  for (uint64_t i = 0; i < 4; ++i) {  // what its ring held
    auto b = in1.consume();
    ASSERT_TRUE(b) << in1.error();
    EXPECT_EQ((*b)[0].value, i);
    EXPECT_EQ(in1.last_sequence(), i);
  }
  for (uint64_t i = 4; i < kRecords; ++i) {
    EXPECT_FALSE(in1.consume());
    ASSERT_EQ(in1.status(), Status::kGap) << in1.error();
    EXPECT_EQ(in1.gap(), i);
    EXPECT_NE(in1.error().find("skipped this target"), std::string::npos) << in1.error();
  }
  EXPECT_FALSE(in1.consume());
  EXPECT_EQ(in1.status(), Status::kEndOfFlow) << in1.error();
  closer.join();
  EXPECT_EQ(closed, Status::kOk) << out.error();
  EXPECT_FALSE(in0.consume());
  EXPECT_EQ(in0.status(), Status::kEndOfFlow) << in0.error();
}

// A skipped target that has room again and gets a later number from every
// open source knows at once that the numbers below it are gaps: no open
// source can still send them (its numbers grow along its ring). The gap
// timeout is 10 minutes: a target that waited for it would hang the test.
TEST(ReplicateFlowTest, ASkippedTargetGivenALaterNumberByEverySourceReportsItsGapsAtOnce) {
  testing::LocalFlow flow(skipping_spec().gap_timeout(std::chrono::minutes(10)).spec());
  auto out = flow.source<Stamped>(0);
  auto in0 = flow.target<Stamped>(0);
  auto in1 = flow.target<Stamped>(1);
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_EQ(out.push(Stamped{0, i}), Status::kOk) << out.error();
    ASSERT_TRUE(in0.consume()) << in0.error();
  }
  for (uint64_t i = 0; i < 4; ++i) {  // what its ring held; it has room again
    auto b = in1.consume();
    ASSERT_TRUE(b) << in1.error();
    EXPECT_EQ(in1.last_sequence(), i);
  }
  ASSERT_EQ(out.push(Stamped{0, 10}), Status::kOk) << out.error();
  for (uint64_t i = 4; i < 10; ++i) {
    EXPECT_FALSE(in1.consume());
    ASSERT_EQ(in1.status(), Status::kGap) << in1.error();
    EXPECT_EQ(in1.gap(), i);
    EXPECT_NE(in1.error().find("every open source is past it"), std::string::npos) << in1.error();
  }
  auto b = in1.consume();
  ASSERT_TRUE(b) << in1.error();
  EXPECT_EQ((*b)[0].value, 10u);
  EXPECT_EQ(in1.last_sequence(), 10u);
  out.abort();
}

// The same, polled by a Worker (as an application's loop does, never
// waiting in the target): every poll hands out the next gap or the record.
// It once found each such gap only at its liveness check, at most one per
// park: a run of thousands of numbers a target missed while stopped cost
// it minutes, during which it returned no credit, and its sources' close()
// waited for room for their END as long.
TEST(ReplicateFlowTest, AWorkerPollingASkippedTargetGetsItsKnownGapsOnePerPoll) {
  testing::LocalFlow flow(skipping_spec().gap_timeout(std::chrono::minutes(10)).spec());
  auto out = flow.source<Stamped>(0);
  auto in0 = flow.target<Stamped>(0);
  auto in1 = flow.target<Stamped>(1);
  constexpr uint64_t kMissed = 200;  // numbers 4 .. 203
  for (uint64_t i = 0; i < 4 + kMissed; ++i) {
    ASSERT_EQ(out.push(Stamped{0, i}), Status::kOk) << out.error();
    ASSERT_TRUE(in0.consume()) << in0.error();
  }
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(in1.consume()) << in1.error();
  ASSERT_EQ(out.push(Stamped{0, 4 + kMissed}), Status::kOk) << out.error();
  std::vector<uint64_t> gaps, values;
  Worker w(IdleStrategy{0, 0});
  w.add(
      std::move(in1),
      [&](std::span<const Stamped> b) {
        for (const Stamped& r : b) values.push_back(r.value);
      },
      [&](uint64_t number) { gaps.push_back(number); });
  for (uint64_t i = 0; i <= kMissed; ++i) {
    ASSERT_NE(w.poll(), 0u) << "poll " << i << " found nothing; gaps so far " << gaps.size();
  }
  ASSERT_EQ(gaps.size(), kMissed);
  for (uint64_t i = 0; i < kMissed; ++i) EXPECT_EQ(gaps[i], 4 + i);
  EXPECT_EQ(values, std::vector<uint64_t>{4 + kMissed});
  out.abort();
}

// A Worker's push into a flow that skips full targets goes on past a
// target that takes nothing, though nothing else wakes the Worker (no
// input, no credit): its park ends at the limit (WaitSet::wake; else at
// the next 50 ms park slice).
TEST(ReplicateFlowTest, AWorkerPushGoesOnPastAFullTargetOfAFlowThatSkipsIt) {
  testing::LocalFlow flow(skipping_spec().spec());
  auto out = flow.source<Stamped>(0);
  auto in0 = flow.target<Stamped>(0);
  Worker w(IdleStrategy{0, 0});  // parks at once
  for (uint64_t i = 0; i < 12; ++i) {
    ASSERT_EQ(w.push(out, Stamped{0, i}), Status::kOk) << out.error();
    auto b = in0.consume();
    ASSERT_TRUE(b) << in0.error();
    EXPECT_EQ((*b)[0].value, i);
  }
  out.abort();
}

TEST(ReplicateFlowTest, SpecRejectsKeysAndOrderedShuffles) {
  FlowSpec bad = small_spec(1, 1).spec();
  detail::FlowSpecAccess::route(bad) = detail::Route::kHashRecord;
  EXPECT_THROW(bad.validate(), Error);
  FlowSpec ordered_shuffle =
      shuffle<Stamped>("s").sources(testing::slots(1)).targets(testing::slots(1)).spec();
  detail::FlowSpecAccess::ordered(ordered_shuffle) = true;
  EXPECT_THROW(ordered_shuffle.validate(), Error);
}

}  // namespace
}  // namespace sluice
