#include <gtest/gtest.h>

#include "sluice/flow.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

struct Rec {
  uint64_t key;
  uint64_t value;
};

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

TEST(FlowSpecTest, ValidationNamesTheProblem) {
  auto base = shuffle<Rec>("orders").sources(testing::slots(2)).targets(testing::slots(2));
  EXPECT_EQ(validation_error(base.spec()), "");
  EXPECT_NE(validation_error(shuffle<Rec>("orders").targets(testing::slots(1)).spec()).find("has no sources"),
            std::string::npos);
  EXPECT_NE(validation_error(shuffle<Rec>("orders").sources(testing::slots(1)).spec()).find("has no targets"),
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
  EXPECT_NE(validation_error(shuffle<Rec>("").sources(testing::slots(1)).targets(testing::slots(1)).spec())
                .find("non-empty name"),
            std::string::npos);
  auto bytes = shuffle_bytes("b").sources(testing::slots(1)).targets(testing::slots(1)).key(0, 0);
  EXPECT_NE(validation_error(bytes.spec()).find("size 0"), std::string::npos);
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

}  // namespace
}  // namespace sluice
