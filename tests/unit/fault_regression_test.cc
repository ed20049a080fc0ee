// Regression tests for the defects of the reliability review (issue 10) that
// show on the shm cores inside one process: each failed before its fix.
// The multi-process and ofi ones are in tests/faults/.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "control/registry_client.h"
#include "flow/liveness.h"
#include "sluice/flow.h"
#include "support/key_value.h"
#include "support/local_flow.h"
#include "wire/layout.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

std::vector<std::byte> records(const std::vector<std::string>& texts) {
  std::vector<std::byte> out;
  for (const std::string& t : texts) {
    const size_t at = out.size();
    out.resize(at + detail::record_stride(t.size()));
    const auto len = static_cast<uint32_t>(t.size());
    std::memcpy(out.data() + at, &len, 4);
    std::memcpy(out.data() + at + 4, t.data(), t.size());
  }
  return out;
}

// Item 4: a peer that rewrites a length after the segment was validated can
// change record bytes, never make iteration leave the segment.
TEST(RecordBatchRegressionTest, ALengthRewrittenAfterValidationNeverLeadsOutOfTheSegment) {
  for (uint32_t hostile : {0xfffffff0u, 17u, 9u, 8u}) {
    auto buf = records({"alpha", "beta", "gamma"});
    ASSERT_TRUE(detail::validate_records(buf.data(), static_cast<uint32_t>(buf.size())));
    // A heap copy of exactly the segment's size, so ASan flags any overrun.
    auto* seg = new std::byte[buf.size()];
    std::memcpy(seg, buf.data(), buf.size());
    RecordBatch batch = detail::make_record_batch(seg, static_cast<uint32_t>(buf.size()));
    auto it = batch.begin();
    ASSERT_EQ((*it).size(), 5u);
    // The second record's length grows under the iterator's feet.
    std::memcpy(seg + detail::record_stride(5), &hostile, 4);
    size_t n = 1;
    for (++it; it != batch.end(); ++it, ++n) {
      const auto r = *it;
      EXPECT_GE(r.data(), seg);
      EXPECT_LE(r.data() + r.size(), seg + buf.size()) << "length " << hostile;
      ASSERT_LT(n, 8u);
    }
    delete[] seg;
  }
}

TEST(RecordBatchRegressionTest, ALengthRewrittenBeforeIterationStopsIt) {
  auto buf = records({"alpha", "beta"});
  const uint32_t huge = 1u << 30;
  std::memcpy(buf.data(), &huge, 4);
  RecordBatch batch = detail::make_record_batch(buf.data(), static_cast<uint32_t>(buf.size()));
  size_t n = 0;
  for (auto r : batch) n += r.size() + 1;
  EXPECT_EQ(n, 0u);
}

// Item 6: an ordered flow's sequence prefix keeps records aligned.
struct alignas(16) Aligned16 {
  uint64_t a;
  uint64_t b;
};

TEST(OrderedAlignmentTest, RecordsAlignedAbove8StayAlignedBehindTheSequenceNumber) {
  auto spec =
      replicate<Aligned16>("wide").sources(testing::slots(1)).targets(testing::slots(2)).ordered();
  EXPECT_EQ(spec.spec().segment_prefix_bytes(), 16u);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Aligned16>(0);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(out.push(Aligned16{i, ~i}), Status::kOk);
  ASSERT_EQ(out.close(), Status::kOk);
  for (uint32_t t = 0; t < 2; ++t) {
    auto in = flow.target<Aligned16>(t);
    uint64_t next = 0;
    while (auto b = in.consume()) {
      ASSERT_EQ(reinterpret_cast<uintptr_t>(b->data()) % alignof(Aligned16), 0u);
      for (const Aligned16& w : *b) {
        EXPECT_EQ(w.a, next);
        EXPECT_EQ(w.b, ~next);
        ++next;
      }
    }
    EXPECT_EQ(in.status(), Status::kEndOfFlow) << in.error();
    EXPECT_EQ(next, 1000u);
  }
}

// Item 12: one byte-record limit, stated by the spec and enforced by push.
TEST(RecordLimitTest, TheStatedByteRecordLimitIsTheEnforcedOne) {
  struct Case {
    uint32_t segment_bytes;
    bool ordered;
    uint32_t limit;
  };
  for (const Case& c :
       {Case{0, false, 8188}, Case{256, false, 252}, Case{100, false, 92}, Case{256, true, 244}}) {
    FlowSpec spec =
        c.ordered
            ? replicate<Bytes>("b")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .ordered()
                  .spec()
            : shuffle<Bytes>("b").sources(testing::slots(1)).targets(testing::slots(1)).spec();
    detail::FlowSpecAccess::segment_bytes(spec) = c.segment_bytes;
    ASSERT_EQ(spec.max_record_bytes(), c.limit) << c.segment_bytes;
    testing::LocalFlow flow(spec);
    auto out = flow.source<Bytes>(0);
    auto in = flow.target<Bytes>(0);
    std::vector<std::byte> rec(c.limit + 1, std::byte{7});
    EXPECT_EQ(out.push(std::span(rec).first(c.limit)), Status::kOk) << c.segment_bytes;
    EXPECT_EQ(out.push(rec), Status::kInvalid) << c.segment_bytes;
    EXPECT_NE(out.error().find(std::to_string(c.limit)), std::string::npos) << out.error();
    ASSERT_EQ(out.close(), Status::kOk);
    auto b = in.consume();
    ASSERT_TRUE(b);
    EXPECT_EQ((*b->begin()).size(), c.limit);
  }
}

// Item 16: error() describes the last call only.
TEST(ErrorTextTest, AnOldFailureIsNotReportedAfterALaterSuccess) {
  auto spec =
      shuffle<Rec>("e").sources(testing::slots(1)).targets(testing::slots(2)).explicit_targets();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  EXPECT_EQ(out.push_to(5, Rec{}), Status::kInvalid);
  EXPECT_FALSE(out.error().empty());
  EXPECT_EQ(out.push_to(0, Rec{}), Status::kOk);
  EXPECT_TRUE(out.error().empty()) << out.error();
  auto in = flow.target<Rec>(1);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::milliseconds(1)));
  EXPECT_EQ(in.status(), Status::kTimeout);
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_TRUE(in.error().empty()) << in.error();
}

// Item 9: a target destroyed before the end of the flow is reported to its
// sources at once, on a blocked push and on a later try_push and close().
TEST(TargetAbortTest, ABlockedPushLearnsThatItsTargetWasDestroyed) {
  auto spec = shuffle<Rec>("abort")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .segment_bytes(64)
                  .ring_segments(2);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = std::make_unique<Target<Rec>>(flow.target<Rec>(0));
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in.reset();
  });
  Status s = Status::kOk;
  const auto start = Clock::now();
  for (int i = 0; i < 1000 && s == Status::kOk; ++i)
    s = out.push(Rec{}, Clock::now() + std::chrono::seconds(30));
  killer.join();
  EXPECT_EQ(s, Status::kPeerLost);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(out.error().find("destroyed before the end of the flow"), std::string::npos)
      << out.error();
  EXPECT_EQ(out.try_push(Rec{}), Status::kPeerLost);
  EXPECT_EQ(out.close(), Status::kPeerLost);
}

TEST(TargetAbortTest, CloseReportsATargetDestroyedBeforeItsEndEvenWithCreditLeft) {
  auto spec = shuffle<Rec>("abort2").sources(testing::slots(1)).targets(testing::slots(1));
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  { auto in = flow.target<Rec>(0); }
  EXPECT_EQ(out.push(Rec{}), Status::kOk);  // there is room: nothing waits
  EXPECT_EQ(out.close(), Status::kPeerLost);
  EXPECT_NE(out.error().find("target (0,0)"), std::string::npos) << out.error();
}

TEST(TargetAbortTest, AReplicateFanOutGoesOnWithoutADestroyedTarget) {
  auto spec = replicate<Rec>("fan")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .segment_bytes(64)
                  .ring_segments(2);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto keep = flow.target<Rec>(1);
  { auto gone = flow.target<Rec>(0); }
  uint64_t got = 0, sum = 0;
  const uint64_t n = 10000;
  for (uint64_t i = 0; i < n; ++i) {
    Status s;
    while ((s = out.try_push(Rec{i, i})) == Status::kWouldBlock) {
      while (auto b = keep.try_consume()) {
        for (const Rec& r : *b) sum += r.value, ++got;
      }
    }
    ASSERT_EQ(s, Status::kOk) << out.error();
  }
  Status c;
  while ((c = out.close(Clock::now())) == Status::kTimeout) {
    while (auto b = keep.try_consume()) {
      for (const Rec& r : *b) sum += r.value, ++got;
    }
  }
  EXPECT_EQ(c, Status::kPeerLost);
  EXPECT_NE(out.error().find("target (0,0)"), std::string::npos) << out.error();
  while (auto b = keep.consume()) {
    for (const Rec& r : *b) sum += r.value, ++got;
  }
  EXPECT_EQ(keep.status(), Status::kEndOfFlow) << keep.error();
  EXPECT_EQ(got, n);
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

// A liveness whose one dead rank a test can set and clear (control's
// PeerTable keeps a rank dead forever).
class SwitchLiveness final : public detail::Liveness {
 public:
  std::atomic<int> dead{-1};
  mutable std::atomic<int> heard{-1};  // the last rank heard lost (hear_lost)
  bool alive(uint32_t rank) const override { return static_cast<int>(rank) != dead.load(); }
  bool registry_lost() const override { return false; }
  std::string describe(uint32_t rank) const override {
    return "rank " + std::to_string(rank) + " died: test";
  }
  void hear_lost(uint32_t rank) const override { heard = static_cast<int>(rank); }
  bool heard_lost(uint32_t rank) const override { return static_cast<int>(rank) == heard.load(); }
};

// `end` (a source or target) failed naming `rank`, with `text` in its error.
template <class End>
void expect_lost_rank(const End& end, const char* text, uint32_t rank = 2) {
  EXPECT_NE(end.error().find(text), std::string::npos) << end.error();
  ASSERT_TRUE(end.lost_peer().has_value());
  EXPECT_EQ(end.lost_peer()->rank, rank);
}

// Sources on ranks 0 and 2 into a target on rank 1; tiny rings.
auto two_sources_one_target(const char* name) {
  return shuffle<Rec>(name)
      .sources({{0, 0}, {2, 0}})
      .targets({{1, 0}})
      .segment_bytes(64)
      .ring_segments(2);
}
// A source on rank 0 into targets on ranks 1 and 2, by explicit target.
auto one_source_two_targets(const char* name) {
  return shuffle<Rec>(name)
      .sources({{0, 0}})
      .targets({{1, 0}, {2, 0}})
      .segment_bytes(64)
      .ring_segments(2)
      .explicit_targets();
}

// An end destroyed after its process lost a rank of the flow tells its
// peers which (the abort word): a peer whose own process has not heard of
// that loss yet still names it, and reports it as the lost peer, rather
// than the rank of the end that was destroyed (a nam.olap_test flake: rank
// 1 named only rank 3's destroyed target, when rank 2's death was why).
TEST(AbortCauseTest, ADestroyedTargetNamesTheRankItsProcessHadLost) {
  auto spec = two_sources_one_target("cause-t");
  SwitchLiveness peers;
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  {
    auto in = flow.target<Rec>(0);
    peers.dead = 2;  // the target's process learns of rank 2's death, then drops it
  }
  peers.dead = -1;  // the source's process has not heard of it
  Status s = Status::kOk;
  for (int i = 0; i < 100 && s == Status::kOk; ++i) s = out.try_push(Rec{});
  EXPECT_EQ(s, Status::kPeerLost);
  expect_lost_rank(out,
                   "destroyed before the end of the flow (its rank had lost rank 2 of the flow)");
}

TEST(AbortCauseTest, AnAbortedSourceNamesTheRankItsProcessHadLost) {
  auto spec = one_source_two_targets("cause-s");
  SwitchLiveness peers;
  testing::LocalFlow flow(spec.spec(), &peers);
  auto in = flow.target<Rec>(0);
  {
    auto out = flow.source<Rec>(0);
    ASSERT_EQ(out.push_to(0, Rec{}), Status::kOk);
    ASSERT_EQ(out.flush(), Status::kOk);
    peers.dead = 2;  // destroyed without close() once its process lost rank 2
  }
  peers.dead = -1;
  uint64_t got = 0;
  while (auto batch = in.consume(Clock::now() + std::chrono::seconds(10))) got += batch->size();
  EXPECT_EQ(got, 1u);  // what was published before the abort is delivered
  EXPECT_EQ(in.status(), Status::kPeerLost);
  expect_lost_rank(
      in,
      "was aborted (abort(), a failure, or destroyed without close()) after its rank lost rank 2");
}

// A replicate source drops a target whose end was destroyed and goes on for
// the others; the peer it reports lost is the rank the target's process had
// lost, as for a shuffle source, not the target's own (live) rank (the
// join's replicate survivors named rank 0 when rank 1 was killed).
TEST(AbortCauseTest, AReplicateSourceNamesTheRankADroppedTargetsProcessHadLost) {
  auto spec = replicate<Rec>("cause-r")
                  .sources({{0, 0}})
                  .targets({{1, 0}, {2, 0}, {3, 0}})
                  .segment_bytes(64)
                  .ring_segments(2);
  SwitchLiveness peers;
  testing::LocalFlow flow(spec.spec(), &peers);
  auto kept = flow.target<Rec>(1);
  auto kept_too = flow.target<Rec>(2);
  auto out = flow.source<Rec>(0);
  {
    auto dropped = flow.target<Rec>(0);
    peers.dead = 2;  // the target's process learns of rank 2's death, then drops it
  }
  peers.dead = -1;  // the source's process has not heard of it
  ASSERT_EQ(out.push(Rec{7, 7}), Status::kOk);
  EXPECT_EQ(out.close(), Status::kPeerLost);
  expect_lost_rank(out, "every other target got every record");
  for (auto* in : {&kept, &kept_too}) {
    uint64_t got = 0;
    while (auto batch = in->consume(Clock::now() + std::chrono::seconds(10))) got += batch->size();
    EXPECT_EQ(got, 1u);
    EXPECT_EQ(in->status(), Status::kEndOfFlow);
  }
}

// A cause heard in one flow's abort is the cause of the process's next
// abort in another flow that has that rank, though its own liveness has not
// heard of the loss yet (nam.nam_test's 2PC flake: a server aborted its
// reply flow because of rank 1's loss heard through its request flow, and
// the clients blamed the server).
// Rank 0 left the job (its process had seen rank 2 die and ended) and rank
// 2 died, both with a source of the flow open: the target names the death,
// whichever source it looks at first (a python.test_flows flake: rank 2
// named rank 0's leaving when rank 1's death was why).
class LeftAndDiedLiveness final : public detail::Liveness {
 public:
  bool alive(uint32_t rank) const override { return rank != 0 && rank != 2; }
  bool left(uint32_t rank) const override { return rank == 0; }
  bool registry_lost() const override { return false; }
  std::string describe(uint32_t rank) const override {
    return "rank " + std::to_string(rank) + (rank == 0 ? " left the job" : " died: test");
  }
};

TEST(AbortCauseTest, ATargetThatLostASourceToALeaveAndOneToADeathNamesTheDeath) {
  auto spec = two_sources_one_target("left-died");
  LeftAndDiedLiveness peers;
  testing::LocalFlow flow(spec.spec(), &peers);
  auto in = flow.target<Rec>(0);
  auto from_0 = flow.source<Rec>(0);  // open, neither closed nor aborted
  auto from_2 = flow.source<Rec>(1);
  EXPECT_FALSE(in.consume(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(in.status(), Status::kPeerLost);
  EXPECT_NE(in.error().find("lost source (2,0) before it closed"), std::string::npos) << in.error();
  expect_lost_rank(in, "rank 2 died: test", 2);
}

TEST(AbortCauseTest, ACauseHeardInOneFlowNamesTheNextAbortInAnother) {
  auto spec_a = shuffle<Rec>("heard-a")
                    .sources({{0, 0}, {3, 0}})
                    .targets({{1, 0}})
                    .segment_bytes(64)
                    .ring_segments(2);
  auto spec_b = shuffle<Rec>("heard-b")
                    .sources({{1, 0}, {3, 0}})
                    .targets({{2, 0}})
                    .segment_bytes(64)
                    .ring_segments(2);
  SwitchLiveness peers;
  testing::LocalFlow a(spec_a.spec(), &peers);
  testing::LocalFlow b(spec_b.spec(), &peers);
  auto in_a = a.target<Rec>(0);
  auto in_b = b.target<Rec>(0);
  {
    auto out_a = a.source<Rec>(0);
    peers.dead = 3;  // the source's process saw rank 3 die, then aborted
  }
  peers.dead = -1;  // this process has not heard of it
  EXPECT_FALSE(in_a.consume(Clock::now() + std::chrono::seconds(10)));
  expect_lost_rank(in_a, "after its rank lost rank 3", 3);
  {
    auto out_b = b.source<Rec>(0);  // rank 1 aborts flow b because of it
  }
  EXPECT_FALSE(in_b.consume(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(in_b.status(), Status::kPeerLost);
  EXPECT_NE(in_b.error().find("source (1,0)"), std::string::npos) << in_b.error();
  expect_lost_rank(in_b, "after its rank lost rank 3", 3);
}

// A target that failed for good tells its sources when it fails, not when
// it is destroyed: it takes nothing more, but its rank lives on, so a source
// watching only that rank would wait for its credit until the target is
// destroyed. Found as a deadlock of multihost_test's fault worker, which
// held its failed targets.
TEST(FailedEndTest, ASourceWaitingForCreditLearnsThatItsTargetFailed) {
  auto spec = two_sources_one_target("failed-t");
  SwitchLiveness peers;
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  while (out.try_push(Rec{}) == Status::kOk) {
  }
  peers.dead = 2;  // source (1,0) is lost before it closed: the target fails
  while (in.consume(Clock::now() + std::chrono::seconds(10))) {
  }
  ASSERT_EQ(in.status(), Status::kPeerLost) << in.error();
  peers.dead = -1;  // the source's process has not heard of rank 2's death
  // The target lives on, failed: the source fills the credit it returned,
  // then must hear of the failure instead of waiting for more.
  Status s = Status::kOk;
  const auto start = Clock::now();
  for (int i = 0; i < 1000 && s == Status::kOk; ++i)
    s = out.push(Rec{}, Clock::now() + std::chrono::seconds(30));
  EXPECT_EQ(s, Status::kPeerLost) << out.error();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  expect_lost_rank(
      out,
      "failed or was destroyed before the end of the flow (its rank had lost rank 2 of the flow)");
  EXPECT_FALSE(in.try_consume());  // still failed, still here
}

// Item 10: the non-blocking calls report a lost peer (they returned
// kWouldBlock / kTimeout forever).
TEST(NonBlockingLivenessTest, TryPushTryConsumeAndAPastDeadlineCloseReportALostRank) {
  auto spec = shuffle<Rec>("nb")
                  .sources({{0, 0}, {1, 0}})
                  .targets({{0, 0}, {1, 0}})
                  .segment_bytes(64)
                  .ring_segments(2)
                  .explicit_targets();
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  while (out.try_push_to(1, Rec{}) == Status::kOk) {
  }
  EXPECT_EQ(out.try_push_to(1, Rec{}), Status::kWouldBlock);
  EXPECT_FALSE(in.try_consume());
  EXPECT_EQ(in.status(), Status::kWouldBlock);
  peers.set(1, control::PeerTable::kDied, "connection closed");
  EXPECT_EQ(out.try_push_to(1, Rec{}), Status::kPeerLost);
  EXPECT_NE(out.error().find("rank 1"), std::string::npos) << out.error();
  EXPECT_EQ(out.close(Clock::now()), Status::kPeerLost);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(out.lost_peer().has_value());
  EXPECT_EQ(out.lost_peer()->rank, 1u);
  EXPECT_FALSE(in.try_consume());
  EXPECT_EQ(in.status(), Status::kPeerLost);
  EXPECT_NE(in.error().find("rank 1"), std::string::npos) << in.error();
  ASSERT_TRUE(in.lost_peer().has_value());
  EXPECT_EQ(in.lost_peer()->rank, 1u);
  // Sticky: the flow cannot deliver what it promised any more.
  EXPECT_FALSE(in.try_consume());
  EXPECT_EQ(in.status(), Status::kPeerLost);
}

// Minor items: sizes that overflow are refused, not wrapped; a record type
// that is not a class can be a flow record.
TEST(GeometryRegressionTest, OverflowingSizesAreReportedNotWrapped) {
  auto g = detail::layout::Geometry::make(65535, 65535, 65536, 64u << 20);
  EXPECT_EQ(g.total_bytes, detail::layout::Geometry::kTooLarge);
  auto ok = detail::layout::Geometry::make(2, 2, 16, 8192);
  EXPECT_NE(ok.total_bytes, detail::layout::Geometry::kTooLarge);
}

TEST(SpecRegressionTest, ScalarRecordsCompileAndFlow) {
  auto spec = shuffle<uint64_t>("scalars").sources(testing::slots(1)).targets(testing::slots(2));
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<uint64_t>(0);
  for (uint64_t i = 0; i < 100; ++i) ASSERT_EQ(out.push(i), Status::kOk);
  ASSERT_EQ(out.close(), Status::kOk);
  uint64_t sum = 0, n = 0;
  for (uint32_t t = 0; t < 2; ++t) {
    auto in = flow.target<uint64_t>(t);
    while (auto b = in.consume()) {
      for (uint64_t v : *b) sum += v, ++n;
    }
  }
  EXPECT_EQ(n, 100u);
  EXPECT_EQ(sum, 4950u);
}

}  // namespace
}  // namespace sluice
