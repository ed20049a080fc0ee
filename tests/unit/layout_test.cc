#include "wire/layout.h"

#include <gtest/gtest.h>

namespace sluice::detail::layout {
namespace {

TEST(LayoutTest, SegmentStrideIsPayloadPlusFooterRoundedToLinePairs) {
  Geometry g = Geometry::make(2, 3, 16, 8192);
  EXPECT_EQ(g.segment_stride, 8320u);  // 8192 + 16 -> 8320 (65 pairs of lines)
  EXPECT_EQ(g.segment_stride % kPair, 0u);
  EXPECT_GE(g.payload_bytes(), 8192u);
  EXPECT_EQ(g.payload_bytes() + kFooterBytes, g.segment_stride);  // the footer ends the segment
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
  const Geometry g = Geometry::make(1, 1, 4, 64);  // a 64-byte record: stride 128
  ASSERT_EQ(g.segment_stride, 128u);
  EXPECT_EQ(g.payload_bytes(), 112u);
  alignas(64) static std::byte mem[sizeof(RingHeader) + 4 * 128];
  RingView ring(mem, g);
  for (uint64_t k = 0; k < 8; ++k) {
    auto* seg = ring.payload(k);
    EXPECT_EQ(seg, mem + sizeof(RingHeader) + (k % 4) * 128);
    EXPECT_EQ(reinterpret_cast<std::byte*>(ring.footer(k)), seg + 112);
  }
}

// A payload that fits one line with its footer (a Latency-mode record of
// at most 48 B) is published and detected on that one line; the pair's
// second line is padding, so segments still start on pairs.
TEST(LayoutTest, SmallPayloadSharesItsFootersLine) {
  for (uint32_t payload : {8u, 16u, 40u, 48u}) {
    const Geometry g = Geometry::make(1, 1, 4, payload);
    EXPECT_EQ(g.segment_stride, 128u) << payload;
    EXPECT_EQ(g.payload_bytes(), 48u) << payload;
    alignas(128) static std::byte mem[sizeof(RingHeader) + 4 * 128];
    RingView ring(mem, g);
    for (uint64_t k = 0; k < 4; ++k) {
      const auto* seg = reinterpret_cast<const std::byte*>(ring.payload(k));
      const auto* foot = reinterpret_cast<const std::byte*>(ring.footer(k));
      EXPECT_EQ(foot, seg + 48);
      EXPECT_EQ((reinterpret_cast<uintptr_t>(foot) + kFooterBytes - 1) / kLine,
                reinterpret_cast<uintptr_t>(seg) / kLine);  // one line
    }
  }
  // 49 B and up: the footer is the segment's last 16 bytes again.
  EXPECT_EQ(Geometry::make(1, 1, 4, 56).payload_bytes(), 112u);
}

TEST(LayoutTest, WordsSharedAcrossProcessesSitOnSeparateLines) {
  EXPECT_EQ(offsetof(RingHeader, consumed), 0u);
  EXPECT_EQ(offsetof(RingHeader, source_waiting), 64u);
  EXPECT_EQ(offsetof(RingHeader, magic), 128u);
  EXPECT_EQ(offsetof(Footer, seq), 8u);
}

}  // namespace
}  // namespace sluice::detail::layout
