// Delivered-position marks: Source::delivered(t) counts a source's records
// that target t consumed and gave back (whole segments, never more than it
// consumed; all of them once it gave everything back), and
// Target::received(s) counts the records handed out from source s, for
// typed and byte records, shuffle and replicate flows, the Latency fast
// path, and a target that goes away mid-flow.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <span>
#include <vector>

#include "sluice/flow.h"
#include "support/key_value.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

// 4 records per segment, 4 segments per ring.
ShuffleSpec<Rec> keyed(uint32_t targets) {
  return shuffle<Rec>("delivered")
      .sources(testing::slots(1))
      .targets(testing::slots(targets))
      .key(&Rec::key)
      .segment_bytes(64)
      .ring_segments(4);
}

// Consumes whatever is ready; returns the records.
template <class T>
uint64_t drain(Target<T>& in) {
  uint64_t n = 0;
  while (auto batch = in.try_consume()) n += batch->size();
  return n;
}

TEST(DeliveredTest, ASourceCountsWhatEachTargetConsumedAndGaveBackAndNoMore) {
  auto spec = keyed(2);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in0 = flow.target<Rec>(0);
  auto in1 = flow.target<Rec>(1);
  std::array<uint64_t, 2> pushed{};
  for (uint64_t i = 0; i < 26; ++i) {
    const Rec r{i * 0x9e3779b97f4a7c15ULL, i};
    pushed[out.target_of(r)] += 1;
    // Never more than a ring's worth ahead of target 0, which drains as it goes.
    while (out.try_push(r) == Status::kWouldBlock) (void)drain(in0);
  }
  ASSERT_GE(pushed[1], 4u) << "the keys should reach both targets";
  ASSERT_EQ(out.flush(), Status::kOk);
  EXPECT_EQ(out.delivered(1), 0u) << "target 1 consumed nothing yet";

  // Target 1 takes one batch and holds it: nothing is given back yet.
  auto first = in1.consume(Deadline::min());
  ASSERT_TRUE(first);
  const uint64_t held = first->size();
  EXPECT_EQ(in1.received(0), held);
  EXPECT_EQ(out.delivered(1), 0u) << "a held batch is not delivered";

  // Target 0 drains (the call that finds nothing gives the last batch back).
  (void)drain(in0);
  EXPECT_EQ(in0.received(0), pushed[0]);
  EXPECT_EQ(out.delivered(0), pushed[0]);

  // Target 1 drains too: every one of its records is delivered, once.
  const uint64_t rest = drain(in1);
  EXPECT_EQ(held + rest, pushed[1]);
  EXPECT_EQ(in1.received(0), pushed[1]);
  EXPECT_EQ(out.delivered(1), pushed[1]);
  EXPECT_EQ(out.delivered(7), 0u) << "an index past the targets";
  EXPECT_EQ(in1.received(3), 0u) << "an index past the sources";
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in0.consume());
  EXPECT_EQ(in0.status(), Status::kEndOfFlow);
  EXPECT_EQ(out.delivered(0), pushed[0]);
}

TEST(DeliveredTest, ATargetDestroyedMidFlowLeavesWholeSegmentsItGaveBack) {
  auto spec = keyed(1);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  uint64_t consumed = 0;
  {
    auto in = flow.target<Rec>(0);
    for (uint64_t i = 0; i < 16; ++i) ASSERT_EQ(out.try_push(Rec{i, i}), Status::kOk);
    // A full ring: the 17th record waits for credit.
    ASSERT_EQ(out.try_push(Rec{16, 16}), Status::kWouldBlock);
    for (int b = 0; b < 3; ++b) {
      auto batch = in.consume(Deadline::min());
      ASSERT_TRUE(batch);
      consumed += batch->size();
    }
    // The target goes away holding its third batch.
  }
  const uint64_t delivered = out.delivered(0);
  EXPECT_LE(delivered, consumed);
  EXPECT_EQ(delivered % 4, 0u) << "whole segments only";
  EXPECT_EQ(consumed, 12u);
  // The source's records from `delivered` on may not have arrived: 16 in all.
  EXPECT_GE(16 - delivered, 4u);
}

TEST(DeliveredTest, ByteRecordsAreCountedAsRecords) {
  auto spec = shuffle<Bytes>("delivered-bytes")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .segment_bytes(256)
                  .ring_segments(4);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Bytes>(0);
  auto in = flow.target<Bytes>(0);
  uint64_t received = 0;
  std::vector<std::byte> rec(64);
  for (uint32_t i = 0; i < 100; ++i) {
    const std::span<const std::byte> r(rec.data(), i % 41);  // 0 .. 40 bytes
    while (out.try_push(r) == Status::kWouldBlock) {
      while (auto batch = in.try_consume())
        for ([[maybe_unused]] auto one : *batch) ++received;
    }
  }
  ASSERT_EQ(out.close(), Status::kOk);
  while (auto batch = in.consume())
    for ([[maybe_unused]] auto one : *batch) ++received;
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_EQ(received, 100u);
  EXPECT_EQ(in.received(0), 100u);
  EXPECT_EQ(out.delivered(0), 100u);
}

TEST(DeliveredTest, ReplicateFlowsCountEachTargetApart) {
  auto spec = replicate<Rec>("delivered-rep")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .segment_bytes(64)
                  .ring_segments(4);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in0 = flow.target<Rec>(0);
  auto in1 = flow.target<Rec>(1);
  for (uint64_t i = 0; i < 12; ++i) ASSERT_EQ(out.try_push(Rec{i, i}), Status::kOk);
  ASSERT_EQ(out.flush(), Status::kOk);
  EXPECT_EQ(drain(in0), 12u);
  EXPECT_EQ(out.delivered(0), 12u);
  EXPECT_EQ(out.delivered(1), 0u);
  EXPECT_EQ(drain(in1), 12u);
  EXPECT_EQ(out.delivered(1), 12u);
  EXPECT_EQ(in0.received(0), 12u);
  EXPECT_EQ(in1.received(0), 12u);
}

TEST(DeliveredTest, TheLatencyFastPathCountsOneRecordPerSegment) {
  auto spec = shuffle<Rec>("delivered-latency")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_EQ(out.push(Rec{i, i}), Status::kOk);
    auto batch = in.consume();
    ASSERT_TRUE(batch);
    ASSERT_EQ(batch->size(), 1u);
    ASSERT_EQ((*batch)[0].value, i);
  }
  EXPECT_EQ(in.received(0), 200u);
  EXPECT_FALSE(in.try_consume());  // gives the last one back
  EXPECT_EQ(out.delivered(0), 200u);
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_EQ(in.received(0), 200u);
}

}  // namespace
}  // namespace sluice
