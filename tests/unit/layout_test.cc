#include "flow/layout.h"

#include <gtest/gtest.h>

namespace sluice::detail::layout {
namespace {

TEST(LayoutTest, SegmentStrideIsPayloadPlusFooterRoundedToLinePairs) {
  Geometry g = Geometry::make(2, 3, 16, 8192);
  EXPECT_EQ(g.segment_stride, 8320u);  // 8192 + 16 -> 8320 (65 pairs of lines)
  EXPECT_EQ(g.segment_stride % kPair, 0u);
  EXPECT_GE(g.payload_bytes(), 8192u);
  EXPECT_EQ(g.payload_bytes() + kFooterBytes, g.segment_stride);
  // A 64-byte record and its footer: one line each, in one pair.
  EXPECT_EQ(Geometry::make(1, 1, 64, 64).segment_stride, 128u);
}

TEST(LayoutTest, RegionIsHeaderThenDoorbellsThenRings) {
  Geometry g = Geometry::make(2, 3, 4, 64);
  EXPECT_EQ(g.doorbell_offset(0), 64u);
  EXPECT_EQ(g.doorbell_offset(1), 128u);
  EXPECT_EQ(g.rings_offset, 256u);  // 192, rounded up to a pair
  EXPECT_EQ(g.ring_stride, sizeof(RingHeader) + 4u * g.segment_stride);
  EXPECT_EQ(g.ring_offset(0, 0), g.rings_offset);
  EXPECT_EQ(g.ring_offset(0, 2), g.rings_offset + 2 * g.ring_stride);
  EXPECT_EQ(g.ring_offset(1, 0), g.rings_offset + 3 * g.ring_stride);
  EXPECT_EQ(g.total_bytes, g.rings_offset + 6 * g.ring_stride);
  EXPECT_EQ(g.ring_offset(1, 2) + g.ring_stride, g.total_bytes);
}

// A core fetches lines in aligned pairs: a pair must never hold the end of
// one segment and the start of the next (see kPair).
TEST(LayoutTest, EverySegmentStartsOnALinePair) {
  for (uint32_t locals : {1u, 2u, 3u}) {
    for (uint32_t payload : {8u, 48u, 64u, 100u, 8192u}) {
      Geometry g = Geometry::make(locals, 3, 5, payload);
      for (uint32_t lt = 0; lt < locals; ++lt) {
        for (uint32_t s = 0; s < 3; ++s) {
          for (uint64_t k = 0; k < 5; ++k) {
            const uint64_t seg = g.ring_offset(lt, s) + sizeof(RingHeader) + k * g.segment_stride;
            EXPECT_EQ(seg % kPair, 0u)
                << locals << " " << payload << " " << lt << " " << s << " " << k;
          }
        }
      }
    }
  }
}

TEST(LayoutTest, FooterSitsInTheLastSixteenBytesOfItsSegment) {
  alignas(64) static std::byte mem[sizeof(RingHeader) + 4 * 128];
  RingView ring(mem, 4, 128);
  for (uint64_t k = 0; k < 8; ++k) {
    auto* seg = ring.payload(k);
    EXPECT_EQ(seg, mem + sizeof(RingHeader) + (k % 4) * 128);
    EXPECT_EQ(reinterpret_cast<std::byte*>(ring.footer(k)), seg + 112);
  }
}

TEST(LayoutTest, WordsSharedAcrossProcessesSitOnSeparateLines) {
  EXPECT_EQ(offsetof(RingHeader, consumed), 0u);
  EXPECT_EQ(offsetof(RingHeader, source_waiting), 64u);
  EXPECT_EQ(offsetof(RingHeader, magic), 128u);
  EXPECT_EQ(offsetof(Footer, seq), 8u);
}

}  // namespace
}  // namespace sluice::detail::layout
