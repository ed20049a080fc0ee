// The shm source/target cores on one thread: credits, back-pressure, end of
// flow, errors. Concurrency is in tests/concurrent.
#include <gtest/gtest.h>

#include "control/registry_client.h"
#include "observe/endpoint_counters.h"
#include "sluice/flow.h"
#include "sluice/worker.h"
#include "support/key_value.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

// 4 records per segment, 4 segments per ring.
ShuffleSpec<Rec> small_spec(uint32_t sources = 1, uint32_t targets = 1,
                            const std::string& name = "small") {
  return shuffle<Rec>(name)
      .sources(testing::slots(sources))
      .targets(testing::slots(targets))
      .segment_bytes(64)
      .ring_segments(4)
      .explicit_targets();
}

TEST(FlowCoreTest, SourceRunsAheadExactlyOneRingThenIsBackPressured) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  const uint32_t per_segment = flow.context().payload_bytes / sizeof(Rec);
  auto out = flow.source<Rec>(0);
  uint64_t pushed = 0;
  while (out.try_push_to(0, Rec{pushed, pushed}) == Status::kOk) ++pushed;
  // Four full segments are published, the fifth cannot be claimed.
  EXPECT_EQ(pushed, 4u * per_segment);
  EXPECT_EQ(out.try_push_to(0, Rec{}), Status::kWouldBlock);

  auto in = flow.target<Rec>(0);
  auto batch = in.consume();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->size(), per_segment);
  EXPECT_EQ((*batch)[0].key, 0u);
  // The first segment is only released at the next consume; then the credit
  // is published when the target runs dry or every S/2 segments.
  ASSERT_TRUE(in.consume());
  ASSERT_TRUE(in.consume());
  EXPECT_EQ(out.try_push_to(0, Rec{pushed, pushed}), Status::kOk);
}

// Target::keep: a kept batch stays where it is in the ring while later
// batches are consumed, and its ring's credit returns in ring order, so
// the source gets room back only once the kept segment is released, and
// then for every segment released behind it.
TEST(FlowCoreTest, AKeptBatchStaysInPlaceAndHoldsItsRingUntilReleased) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  const uint32_t per = flow.context().payload_bytes / sizeof(Rec);
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  uint64_t pushed = 0;
  auto fill = [&] {
    while (out.try_push_to(0, Rec{pushed, pushed}) == Status::kOk) ++pushed;
  };
  fill();
  ASSERT_EQ(pushed, 4u * per);
  auto first = in.consume();
  ASSERT_TRUE(first);
  const Rec* kept = first->data();
  const uint64_t id = in.keep();
  EXPECT_NE(id, 0u);
  EXPECT_EQ(in.keep(), 0u);  // nothing held any more
  auto second = in.consume();
  ASSERT_TRUE(second);
  const uint64_t id2 = in.keep();
  EXPECT_NE(id2, id);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(in.consume());
  EXPECT_EQ(in.try_consume().status(), Status::kWouldBlock);
  // Everything consumed, but segment 0 is kept: the ring has no room.
  fill();
  EXPECT_EQ(pushed, 4u * per);
  in.release(id2);  // behind the kept segment 0: frees nothing yet
  EXPECT_EQ(in.try_consume().status(), Status::kWouldBlock);
  fill();
  EXPECT_EQ(pushed, 4u * per);
  for (uint32_t i = 0; i < per; ++i) EXPECT_EQ(kept[i].key, i);  // never overwritten
  in.release(id);
  in.release(id);  // twice: ignored
  EXPECT_EQ(in.try_consume().status(), Status::kWouldBlock);
  fill();
  EXPECT_EQ(pushed, 8u * per);
  for (uint32_t s = 0; s < 4; ++s) {
    auto b = in.consume();
    ASSERT_TRUE(b);
    EXPECT_EQ((*b)[0].key, (4u + s) * per);
  }
}

// The same for a flow of byte records: Target<Bytes> keeps a batch the same
// way, and its records stay readable in place until released.
TEST(FlowCoreTest, AKeptByteBatchStaysInPlaceUntilReleased) {
  auto spec = shuffle<Bytes>("b")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .segment_bytes(64)
                  .ring_segments(4)
                  .explicit_targets();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Bytes>(0);
  auto in = flow.target<Bytes>(0);
  uint64_t pushed = 0;
  auto fill = [&] {
    while (out.try_push_to(0, std::as_bytes(std::span(&pushed, 1))) == Status::kOk) ++pushed;
  };
  fill();
  const uint64_t per_ring = pushed;  // 12-byte records padded to 16: 4 a segment
  ASSERT_EQ(per_ring, 16u);
  auto first = in.consume();
  ASSERT_TRUE(first);
  const RecordBatch kept = *first;
  const uint64_t id = in.keep();
  ASSERT_NE(id, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(in.consume());
  EXPECT_EQ(in.try_consume().status(), Status::kWouldBlock);
  fill();
  EXPECT_EQ(pushed, per_ring);  // the kept segment holds the ring
  uint64_t expect = 0;
  for (std::span<const std::byte> r : kept) {
    uint64_t v = 0;
    ASSERT_EQ(r.size(), sizeof(v));
    std::memcpy(&v, r.data(), sizeof(v));
    EXPECT_EQ(v, expect++);  // never overwritten
  }
  EXPECT_EQ(expect, 4u);
  in.release(id);
  EXPECT_EQ(in.try_consume().status(), Status::kWouldBlock);
  fill();
  EXPECT_EQ(pushed, 2 * per_ring);
}

// Adds `in` to `w` with a handler that counts, pushes 1000 records (250
// segments through a ring of 4) into `out` through `w`, closes it and runs
// `w` to the end: every record arrived once (count and sum).
constexpr uint64_t kRecords = 1000;
void push_through_worker(Worker& w, Target<Rec> in, Source<Rec>& out) {
  uint64_t got = 0, sum = 0;
  w.add(std::move(in), [&](std::span<const Rec> batch) {
    for (const Rec& r : batch) {
      ++got;
      sum += r.value;
    }
  });
  for (uint64_t i = 0; i < kRecords; ++i) ASSERT_EQ(w.push_to(out, 0, Rec{i, i}), Status::kOk);
  ASSERT_EQ(w.close(out), Status::kOk) << out.error();
  ASSERT_EQ(w.run(), Status::kEndOfFlow);
  EXPECT_EQ(got, kRecords);
  EXPECT_EQ(sum, kRecords * (kRecords - 1) / 2);
}

// A push that waits inside a Worker (which consumes meanwhile) counts as
// the source's credit wait, as a blocking push's wait does: sluice top and
// the Prometheus endpoint show back-pressure whichever way a thread waits.
TEST(FlowCoreTest, AWorkersWaitForRoomCountsAsTheSourcesCreditWait) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  Worker w;
  push_through_worker(w, flow.target<Rec>(0), out);
  bool found = false;
  for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
    if (r.flow != "small" || r.role != detail::counters::Role::kSource) continue;
    found = true;
    EXPECT_GT(r.credit_waits, 0u);
    EXPECT_EQ(r.bytes, kRecords * sizeof(Rec));
  }
  EXPECT_TRUE(found);
}

// A Worker that owns its source (add_output) delivers through it as through
// one the caller keeps, and the source lives exactly as long as the worker:
// nothing can end it before the loop that drives it.
TEST(FlowCoreTest, AWorkerOwnsTheSourceGivenToItAndDeliversThroughIt) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  Worker w;
  Source<Rec>& out = w.add_output(flow.source<Rec>(0));
  push_through_worker(w, flow.target<Rec>(0), out);
  EXPECT_FALSE(w.failure());
  EXPECT_THROW(w.add_output(Source<Rec>()), Error);
}

// abort() on an empty handle (default-constructed, or moved from) does
// nothing, as its destructor does: a program that keeps a slot per peer and
// aborts them all after a failure need not test each first.
TEST(FlowCoreTest, AbortOnAnEmptySourceDoesNothing) {
  Source<Rec> typed;
  typed.abort();
  Source<Bytes> bytes;
  bytes.abort();
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  Source<Rec> moved = std::move(out);
  out.abort();  // NOLINT(bugprone-use-after-move): the moved-from handle is empty
  EXPECT_FALSE(out);
  EXPECT_TRUE(moved);
  EXPECT_EQ(moved.close(), Status::kOk);
}

// consume() returns its Status with the batch: a batch tests true, the end
// of the flow is a Result without one that says kEndOfFlow.
TEST(FlowCoreTest, ConsumeCarriesItsStatus) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  ASSERT_EQ(out.push_to(0, Rec{7, 7}), Status::kOk);
  ASSERT_EQ(out.close(), Status::kOk);
  Result<std::span<const Rec>> batch = in.consume(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch.status(), Status::kOk);
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ((*batch)[0].key, 7u);
  auto end = in.consume(Clock::now() + std::chrono::seconds(10));
  EXPECT_FALSE(end);
  EXPECT_FALSE(end.has_value());
  EXPECT_EQ(end.status(), Status::kEndOfFlow);
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  auto none = in.try_consume();
  EXPECT_EQ(none.status(), Status::kEndOfFlow);
}

// Worker::failure() names the input that failed, its flow and slot, the
// status, the target's own words and the rank that was lost.
TEST(FlowCoreTest, AWorkersFailureNamesTheInputItsFlowAndTheLostRank) {
  auto spec = shuffle<Rec>("lost-input")
                  .sources({{1, 0}})
                  .targets({{0, 3}})
                  .segment_bytes(64)
                  .ring_segments(4);
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  Worker w;
  uint64_t got = 0;
  const Worker::InputId id =
      w.add(flow.target<Rec>(0), [&](std::span<const Rec> batch) { got += batch.size(); });
  ASSERT_EQ(out.push(Rec{5, 5}), Status::kOk);
  ASSERT_EQ(out.flush(), Status::kOk);
  EXPECT_FALSE(w.failure());
  peers.set(1, control::PeerTable::kDied, "connection closed");
  ASSERT_EQ(w.run(Clock::now() + std::chrono::seconds(10)), Status::kPeerLost);
  EXPECT_EQ(got, 1u);  // what was published is delivered first
  const std::optional<WorkerFailure> f = w.failure();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->input, id);
  EXPECT_EQ(f->flow, "lost-input");
  EXPECT_EQ(f->slot, 3u);
  EXPECT_EQ(f->status, Status::kPeerLost);
  EXPECT_NE(f->error.find("rank 1"), std::string::npos) << f->error;
  ASSERT_TRUE(f->peer) << f->error;
  EXPECT_EQ(f->peer->rank, 1u);
}

// A shuffle source that lost one target has failed for good: a push to a
// live target whose segment still has room fails as well (the flow cannot
// deliver what was routed to the lost one), run pushes and the inline path
// included, and the error names the lost rank.
TEST(FlowCoreTest, AFailedSourceRefusesPushesToItsLiveTargetsToo) {
  auto spec = shuffle<Rec>("half-lost")
                  .sources({{0, 0}})
                  .targets({{0, 0}, {1, 0}})
                  .segment_bytes(64)
                  .ring_segments(4)
                  .explicit_targets();
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  ASSERT_EQ(out.push_to(0, Rec{1, 1}), Status::kOk);  // target 0's segment is open, with room
  while (out.try_push_to(1, Rec{2, 2}) == Status::kOk) {
  }
  peers.set(1, control::PeerTable::kDied, "connection closed");
  ASSERT_EQ(out.push_to(1, Rec{2, 2}, Clock::now() + std::chrono::seconds(5)), Status::kPeerLost);
  EXPECT_EQ(out.push_to(0, Rec{3, 3}), Status::kPeerLost) << out.error();
  EXPECT_EQ(out.try_push_to(0, Rec{3, 3}), Status::kPeerLost);
  const Rec run[2] = {{4, 4}, {5, 5}};
  EXPECT_EQ(out.push_to(std::vector<uint32_t>{0, 0}, run), Status::kPeerLost);
  EXPECT_EQ(out.last_pushed(), 0u);
  EXPECT_NE(out.error().find("rank 1"), std::string::npos) << out.error();
  ASSERT_TRUE(out.lost_peer());
  EXPECT_EQ(out.lost_peer()->rank, 1u);
  EXPECT_EQ(out.flush(), Status::kPeerLost);
}

// A source that finds its ring full records the fill as the whole ring
// (sluice top's "fill", Prometheus' sluice_ring_fill_segments); once the
// target consumed, the next look for credit records it emptier.
TEST(FlowCoreTest, ASourceRecordsItsRingFillWhenItLooksForCredit) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  const auto source_reading = [] {
    for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
      if (r.flow == "small" && r.role == detail::counters::Role::kSource) return r;
    }
    ADD_FAILURE() << "no counters of the source";
    return detail::counters::Reading{};
  };
  uint64_t pushed = 0;
  Status s;
  while ((s = out.try_push_to(0, Rec{pushed, pushed})) == Status::kOk) ++pushed;
  ASSERT_EQ(s, Status::kWouldBlock);
  const detail::counters::Reading full = source_reading();
  ASSERT_NE(full.ring_segments, 0u);
  EXPECT_EQ(full.ring_fill, full.ring_segments);
  // Drain, then push until the source next looks for credit.
  uint64_t got = 0;
  while (auto b = in.try_consume()) got += b->size();
  EXPECT_GT(got, 0u);
  uint64_t more = 0;
  while (source_reading().ring_fill == full.ring_segments && more < 10 * pushed) {
    ASSERT_EQ(out.try_push_to(0, Rec{pushed + more, 0}), Status::kOk);
    ++more;
  }
  EXPECT_LT(source_reading().ring_fill, full.ring_segments);
  (void)out.close(Clock::now());
}

TEST(FlowCoreTest, DeliversInOrderThenEndOfFlow) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  uint64_t next = 0, pushed = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 7; ++i, ++pushed)
      ASSERT_EQ(out.push_to(0, Rec{pushed, pushed}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);
    while (auto b = in.try_consume()) {
      for (const Rec& r : *b) EXPECT_EQ(r.key, next++);
    }
    EXPECT_EQ(in.status(), Status::kWouldBlock);
  }
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_EQ(out.close(), Status::kOk);  // idempotent
  EXPECT_EQ(out.push_to(0, Rec{}), Status::kClosed);
  while (auto b = in.consume()) {
    for (const Rec& r : *b) EXPECT_EQ(r.key, next++);
  }
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_EQ(next, pushed);
  EXPECT_FALSE(in.consume());  // stays at end
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
}

TEST(FlowCoreTest, ConsumeTimesOutAtItsDeadline) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  // 200 ms: long enough that the spin and yield rounds before parking end
  // well before the deadline even when other processes hold the CPUs (at
  // 20 ms, 64 sched_yield calls on a loaded machine sometimes took it all).
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::milliseconds(200)));
  EXPECT_EQ(in.status(), Status::kTimeout);
  // It names the source it waits for and when it last delivered (never).
  EXPECT_NE(in.error().find("deadline passed, waiting for source (0,0) on rank 0"),
            std::string::npos)
      << in.error();
  EXPECT_NE(in.error().find("no segment taken yet"), std::string::npos) << in.error();
  // It parks once its spin and yield rounds are over, and counts the time
  // (park%). On a loaded machine those rounds can take a whole deadline, so
  // the wait is repeated (up to ten times, a second each) until a park was
  // counted, rather than asserting that one 200 ms wait parked.
  auto target_reading = [] {
    for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
      if (r.flow == "small" && r.role == detail::counters::Role::kTarget) return r;
    }
    ADD_FAILURE() << "no counters for the target of flow 'small'";
    return detail::counters::Reading{};
  };
  for (int i = 0; i < 10 && target_reading().parks == 0; ++i) {
    EXPECT_EQ(in.consume(Clock::now() + std::chrono::seconds(1)).status(), Status::kTimeout);
  }
  const detail::counters::Reading r = target_reading();
  EXPECT_GE(r.parks, 1u);
  EXPECT_GT(r.park_ns, 0u);
  EXPECT_LT(r.park_ns, 20000000000u);  // not absurd
  (void)out.close();
}

TEST(FlowCoreTest, BlockedPushTimesOutNamingTheTarget) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  Status s = Status::kOk;
  for (int i = 0; i < 1000 && s == Status::kOk; ++i)
    s = out.push_to(0, Rec{}, Clock::now() + std::chrono::milliseconds(20));
  EXPECT_EQ(s, Status::kTimeout);
  EXPECT_NE(out.error().find("target (0,0)"), std::string::npos) << out.error();
}

// A Worker's push with a deadline returns kTimeout at its deadline even
// while its inputs never stop delivering (here a handler that feeds its own
// input again): the caller's loop gets control back, a silent target cannot
// hold it for as long as other work comes.
TEST(FlowCoreTest, AWorkersTimedPushEndsAtItsDeadlineWhileInputsKeepDelivering) {
  auto full_spec = small_spec();
  testing::LocalFlow full(full_spec.spec());
  auto blocked = full.source<Rec>(0);
  while (blocked.try_push_to(0, Rec{}) == Status::kOk) {
  }
  auto busy_spec = small_spec(1, 1, "busy");
  testing::LocalFlow busy(busy_spec.spec());
  auto feed = busy.source<Rec>(0);
  Worker w;
  uint64_t handled = 0;
  w.add(busy.target<Rec>(0), [&](std::span<const Rec> b) {
    handled += b.size();
    (void)feed.try_push_to(0, Rec{handled, 0});  // always more to do
    (void)feed.flush();
  });
  ASSERT_EQ(feed.push_to(0, Rec{}), Status::kOk);
  ASSERT_EQ(feed.flush(), Status::kOk);
  const auto deadline = Clock::now() + std::chrono::milliseconds(50);
  EXPECT_EQ(w.push_to(blocked, 0, Rec{}, deadline), Status::kTimeout);
  EXPECT_GE(Clock::now(), deadline);
  EXPECT_GT(handled, 0u);
}

TEST(FlowCoreTest, ByteRecordTooLargeForASegmentIsInvalid) {
  auto spec =
      shuffle<Bytes>("b").sources(testing::slots(1)).targets(testing::slots(1)).segment_bytes(64);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Bytes>(0);
  std::vector<std::byte> big(200);
  EXPECT_EQ(out.push(big), Status::kInvalid);
  EXPECT_NE(out.error().find("exceeds the largest this flow takes, 60 bytes"), std::string::npos)
      << out.error();
  // The record's own size, not its framed one (203 bytes would be "more
  // than 196").
  EXPECT_NE(out.error().find("a record of 200 bytes exceeds"), std::string::npos) << out.error();
  std::vector<std::byte> ok(20, std::byte{7});
  EXPECT_EQ(out.push(ok), Status::kOk);
  EXPECT_EQ(out.close(), Status::kOk);
  auto in = flow.target<Bytes>(0);
  auto batch = in.consume();
  ASSERT_TRUE(batch);
  size_t n = 0;
  for (auto r : *batch) {
    EXPECT_EQ(r.size(), 20u);
    ++n;
  }
  EXPECT_EQ(n, 1u);
}

TEST(FlowCoreTest, SourceDestroyedWithoutCloseIsReportedNotAwaitedForever) {
  auto spec = small_spec();
  testing::LocalFlow flow(spec.spec());
  auto in = flow.target<Rec>(0);
  {
    auto out = flow.source<Rec>(0);
    ASSERT_EQ(out.push_to(0, Rec{1, 1}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);
  }
  auto b = in.consume(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(b);  // what was published is still delivered
  EXPECT_EQ(b->size(), 1u);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(in.status(), Status::kPeerLost);
  EXPECT_NE(in.error().find("without close()"), std::string::npos) << in.error();
}

TEST(FlowCoreTest, LostSourceRankIsReportedAfterItsDataIsDrained) {
  auto spec =
      shuffle<Rec>("lost").sources({{1, 0}}).targets({{0, 0}}).segment_bytes(64).ring_segments(4);
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  ASSERT_EQ(out.push(Rec{5, 5}), Status::kOk);
  ASSERT_EQ(out.flush(), Status::kOk);
  peers.set(1, control::PeerTable::kDied, "connection closed");
  auto b = in.consume(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].key, 5u);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(in.status(), Status::kPeerLost);
  EXPECT_NE(in.error().find("rank 1"), std::string::npos) << in.error();
}

TEST(FlowCoreTest, LostTargetRankFailsABlockedPush) {
  auto spec =
      shuffle<Rec>("lost").sources({{0, 0}}).targets({{1, 0}}).segment_bytes(64).ring_segments(2);
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  peers.set(1, control::PeerTable::kDied, "no heartbeat for 5000 ms");
  Status s = Status::kOk;
  for (int i = 0; i < 100 && s == Status::kOk; ++i)
    s = out.push(Rec{}, Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s, Status::kPeerLost);
  EXPECT_NE(out.error().find("rank 1"), std::string::npos) << out.error();
}

TEST(FlowCoreTest, LatencyModePublishesEveryRecordAtOnce) {
  auto spec = shuffle<Rec>("lat")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_EQ(out.push(Rec{i, i}), Status::kOk);
    auto b = in.try_consume();
    ASSERT_TRUE(b) << i;
    ASSERT_EQ(b->size(), 1u);
    EXPECT_EQ((*b)[0].key, i);
  }
  EXPECT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
}

// The same at 64 B, whose last word publishes it (layout.h): the inline
// paths' instruction count per record is measured on this test
// (docs/benchmarks.md).
TEST(FlowCoreTest, LatencyModePublishesEvery64ByteRecordAtOnce) {
  struct Rec64 {
    uint64_t key;
    uint64_t pad[7];
  };
  auto spec = shuffle<Rec64>("lat64")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec64>(0);
  auto in = flow.target<Rec64>(0);
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_EQ(out.push(Rec64{i, {i, i, i, i, i, i, i}}), Status::kOk);
    auto b = in.try_consume();
    ASSERT_TRUE(b) << i;
    ASSERT_EQ(b->size(), 1u);
    EXPECT_EQ((*b)[0].key, i);
    EXPECT_EQ((*b)[0].pad[6], i);
  }
  EXPECT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
}

}  // namespace
}  // namespace sluice
