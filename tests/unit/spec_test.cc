#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

#include "sluice/cluster.h"
#include "sluice/combiner.h"
#include "sluice/flow.h"
#include "support/key_value.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

std::string validation_error(const FlowSpec& spec) {
  try {
    spec.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(FlowSpecTest, DefaultsAreEightKiBSegmentsAndSixteenDeepRings) {
  auto spec = shuffle<Rec>("a").sources(testing::slots(1)).targets(testing::slots(1));
  EXPECT_EQ(spec.spec().effective_segment_bytes(), 8192u);
  EXPECT_EQ(spec.spec().effective_ring_segments(), 16u);
  spec.optimize(Optimize::kLatency);
  EXPECT_EQ(spec.spec().effective_segment_bytes(), 16u);  // one record per segment
  EXPECT_EQ(spec.spec().effective_ring_segments(), 64u);
}

// An ordered Bandwidth flow over ofi numbers half a ring per remote
// fetch-and-add: its default ring holds at least 512 KiB, 16 to 64 segments.
TEST(FlowSpecTest, OrderedFlowsOverOfiHaveLongerRingsByDefault) {
  auto spec = replicate<Rec>("r").sources(testing::slots(1)).targets(testing::slots(1)).ordered();
  EXPECT_EQ(spec.spec().effective_ring_segments(false), 16u);
  EXPECT_EQ(spec.spec().effective_ring_segments(true), 64u);  // 8 KiB segments
  spec.segment_bytes(64 * 1024);
  EXPECT_EQ(spec.spec().effective_ring_segments(true), 16u);
  spec.segment_bytes(16 * 1024).ring_segments(8);  // asked for: kept
  EXPECT_EQ(spec.spec().effective_ring_segments(true), 8u);
  auto unordered = replicate<Rec>("u").sources(testing::slots(1)).targets(testing::slots(1));
  EXPECT_EQ(unordered.spec().effective_ring_segments(true), 16u);
}

TEST(FlowSpecTest, ValidationNamesTheProblem) {
  auto base = shuffle<Rec>("orders").sources(testing::slots(2)).targets(testing::slots(2));
  EXPECT_EQ(validation_error(base.spec()), "");
  EXPECT_NE(validation_error(shuffle<Rec>("orders").targets(testing::slots(1)).spec())
                .find("has no sources"),
            std::string::npos);
  EXPECT_NE(validation_error(shuffle<Rec>("orders").sources(testing::slots(1)).spec())
                .find("has no targets"),
            std::string::npos);
  auto dup = base;
  dup.sources({{0, 1}, {0, 1}});
  EXPECT_NE(validation_error(dup.spec()).find("(0,1) twice"), std::string::npos);
  auto small = base;
  small.segment_bytes(8);
  EXPECT_NE(validation_error(small.spec()).find("does not fit a segment"), std::string::npos);
  auto shallow = base;
  shallow.ring_segments(1);
  EXPECT_NE(validation_error(shallow.spec()).find("ring_segments 1"), std::string::npos);
  EXPECT_NE(validation_error(
                shuffle<Rec>("").sources(testing::slots(1)).targets(testing::slots(1)).spec())
                .find("non-empty name"),
            std::string::npos);
  auto bytes = shuffle<Bytes>("b").sources(testing::slots(1)).targets(testing::slots(1)).key(0, 0);
  EXPECT_NE(validation_error(bytes.spec()).find("size 0"), std::string::npos);
}

// An ordered flow's sequencer may sit on any rank of its sources or
// targets; both placement and skipping are for ordered flows only, and every
// participant must agree on them.
TEST(FlowSpecTest, TheSequencerSitsOnAMemberAndSkippingIsForOrderedFlows) {
  auto ord = replicate<Rec>("o")
                 .sources(testing::slots(2, /*rank=*/3))
                 .targets(testing::slots(2, /*rank=*/1))
                 .ordered();
  EXPECT_EQ(ord.spec().effective_sequencer_rank(), 1u);  // the first target's
  EXPECT_EQ(validation_error(ord.sequencer_at(3).spec()), "");
  EXPECT_EQ(ord.spec().effective_sequencer_rank(), 3u);
  EXPECT_NE(validation_error(ord.sequencer_at(2).spec())
                .find("sequencer_at(2): that rank has no source or target"),
            std::string::npos);
  auto unordered =
      replicate<Rec>("u").sources(testing::slots(1)).targets(testing::slots(1)).sequencer_at(0);
  EXPECT_NE(validation_error(unordered.spec()).find("sequencer_at() applies to ordered flows"),
            std::string::npos);
  auto skips = replicate<Rec>("s")
                   .sources(testing::slots(1))
                   .targets(testing::slots(1))
                   .skip_full_targets_after(std::chrono::milliseconds(5));
  EXPECT_NE(validation_error(skips.spec()).find("skip_full_targets_after() applies to ordered"),
            std::string::npos);
  auto a = ord.sequencer_at(3);
  auto b = a;
  b.skip_full_targets_after(std::chrono::milliseconds(100));
  EXPECT_NE(a.spec().canonical().find("sequencer_rank=3\nskip_full_ms=0\n"), std::string::npos);
  EXPECT_NE(b.spec().canonical().find("skip_full_ms=100\n"), std::string::npos);
}

TEST(FlowSpecTest, CanonicalTextDiffersExactlyInTheChangedField) {
  auto a = shuffle<Rec>("f").sources(testing::slots(2)).targets(testing::slots(3)).key(&Rec::key);
  auto b = a;
  EXPECT_EQ(a.spec().canonical(), b.spec().canonical());
  b.segment_bytes(4096);
  EXPECT_NE(a.spec().canonical().find("segment_bytes=8192\n"), std::string::npos);
  EXPECT_NE(b.spec().canonical().find("segment_bytes=4096\n"), std::string::npos);
  EXPECT_NE(a.spec().canonical().find("targets=0:0 0:1 0:2\n"), std::string::npos);
  EXPECT_NE(a.spec().canonical().find("record_size=16\n"), std::string::npos);
}

// One spec per kind of flow, for typed and byte records alike, and no
// detail type reachable through one: the shared setters' builders are
// private bases. The 1.0 names still name the same types.
TEST(FlowSpecTest, OneSpecPerKindWithPrivateBuildersAndThe10NamesAsAliases) {
  static_assert(std::is_same_v<decltype(shuffle<Bytes>("b")), ShuffleSpec<Bytes>>);
  static_assert(std::is_same_v<decltype(replicate<Bytes>("b")), ReplicateSpec<Bytes>>);
  static_assert(!std::is_convertible_v<ShuffleSpec<Rec>&, detail::FlowBuilder<ShuffleSpec<Rec>>&>);
  static_assert(
      !std::is_convertible_v<ShuffleSpec<Bytes>&, detail::ShuffleBuilder<ShuffleSpec<Bytes>>&>);
  static_assert(
      !std::is_convertible_v<ReplicateSpec<Rec>&, detail::ReplicateBuilder<ReplicateSpec<Rec>>&>);
  static_assert(
      !std::is_convertible_v<CombinerSpec<Rec>&, detail::FlowBuilder<CombinerSpec<Rec>>&>);
  static_assert(std::is_same_v<decltype(std::declval<Cluster&>().source(
                                   std::declval<const ShuffleSpec<Bytes>&>(), 0u)),
                               Source<Bytes>>);
  static_assert(std::is_same_v<decltype(std::declval<Cluster&>().target(
                                   std::declval<const ReplicateSpec<Bytes>&>(), 0u)),
                               Target<Bytes>>);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  static_assert(std::is_same_v<BytesShuffleSpec, ShuffleSpec<Bytes>>);
  static_assert(std::is_same_v<BytesReplicateSpec, ReplicateSpec<Bytes>>);
  static_assert(std::is_same_v<BytesSource, Source<Bytes>>);
  static_assert(std::is_same_v<BytesTarget, Target<Bytes>>);
  EXPECT_EQ(shuffle_bytes("x").spec().canonical(), shuffle<Bytes>("x").spec().canonical());
  EXPECT_EQ(replicate_bytes("x").spec().canonical(), replicate<Bytes>("x").spec().canonical());
#pragma GCC diagnostic pop
  EXPECT_EQ(shuffle<Bytes>("x").spec().record_size(), 0u);
  EXPECT_EQ(shuffle<Bytes>("x").spec().type_name(), "bytes");
}

// The fields every kind's builder shares, as declare sees them.
std::string common_fields(const FlowSpec& s) {
  std::string out;
  auto add = [&out](char side, const Endpoint& e) {
    out += side;
    out += std::to_string(e.rank);
    out += ':';
    out += std::to_string(e.slot);
    out += ' ';
  };
  for (const Endpoint& e : s.sources()) add('s', e);
  for (const Endpoint& e : s.targets()) add('t', e);
  return out + std::to_string(s.segment_bytes()) + "/" + std::to_string(s.ring_segments());
}

TEST(FlowSpecTest, EveryKindTakesTheCommonSettersInAnyOrder) {
  const std::string want = "s0:0 s0:1 t0:0 1024/4";
  // Kind-specific setters before and after the common ones keep chaining.
  auto typed = shuffle<Rec>("a")
                   .key(&Rec::key)
                   .sources(testing::slots(2))
                   .targets(testing::slots(1))
                   .segment_bytes(1024)
                   .ring_segments(4)
                   .type_tag("rec-v1")
                   .optimize(Optimize::kBandwidth);
  auto bytes = shuffle<Bytes>("b")
                   .sources(testing::slots(2))
                   .key(0, 8)
                   .targets(testing::slots(1))
                   .segment_bytes(1024)
                   .explicit_targets()
                   .ring_segments(4)
                   .type_tag("bytes-v1");
  auto rep = replicate<Rec>("c")
                 .ordered()
                 .sources(testing::slots(2))
                 .targets(testing::slots(1))
                 .segment_bytes(1024)
                 .ring_segments(4)
                 .gap_timeout(std::chrono::milliseconds(50));
  auto rep_bytes = replicate<Bytes>("d")
                       .sources(testing::slots(2))
                       .ordered(false)
                       .targets(testing::slots(1))
                       .segment_bytes(1024)
                       .ring_segments(4);
  auto comb = combiner<Rec>("e")
                  .group_by(&Rec::key)
                  .sources(testing::slots(2))
                  .sum(&Rec::value)
                  .targets(testing::slots(1))
                  .segment_bytes(1024)
                  .ring_segments(4);
  EXPECT_EQ(common_fields(typed.spec()), want);
  EXPECT_EQ(common_fields(bytes.spec()), want);
  EXPECT_EQ(common_fields(rep.spec()), want);
  EXPECT_EQ(common_fields(rep_bytes.spec()), want);
  EXPECT_EQ(common_fields(comb.spec()), want);

  EXPECT_EQ(typed.spec().type_name(), "rec-v1");
  EXPECT_EQ(typed.spec().route(), Route::kHashKey);
  EXPECT_EQ(bytes.spec().type_name(), "bytes-v1");
  EXPECT_EQ(bytes.spec().route(), Route::kExplicit);
  EXPECT_EQ(rep.spec().type(), FlowType::kReplicate);
  EXPECT_TRUE(rep.spec().ordered());
  EXPECT_EQ(rep.spec().gap_timeout_ms(), 50u);
  EXPECT_EQ(rep_bytes.spec().record_size(), 0u);
  EXPECT_FALSE(rep_bytes.spec().ordered());
  EXPECT_EQ(comb.spec().type(), FlowType::kShuffle);
  EXPECT_EQ(comb.spec().route(), Route::kHashKey);
}

}  // namespace
}  // namespace sluice
