// The Latency-mode fast path over shm (flow_cores.h: push_fast, next_fast)
// on one thread: it hands records over exactly as the slow path did, takes
// turns across rings, meets back-pressure and credit, hands END, failures
// and pushes after close to the slow path, and counts what it moved.
// Real threads (parking and waking on every round trip) are in
// tests/concurrent/ring_concurrent_test.cc.
#include <gtest/gtest.h>

#include <cstring>

#include "control/registry_client.h"
#include "flow/flow_core.h"
#include "observe/endpoint_counters.h"
#include "sluice/flow.h"
#include "support/key_value.h"
#include "support/local_flow.h"
#include "wire/layout.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

ShuffleSpec<Rec> latency_spec(const char* name, uint32_t sources, uint32_t targets = 1) {
  return shuffle<Rec>(name)
      .sources(testing::slots(sources))
      .targets(testing::slots(targets))
      .explicit_targets()
      .optimize(Optimize::kLatency);
}

detail::counters::Reading reading(const std::string& flow, detail::counters::Role role) {
  for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
    if (r.flow == flow && r.role == role) return r;
  }
  ADD_FAILURE() << "no counters for " << flow;
  return {};
}

TEST(LatencyFastTest, TheInlinePathsAreOnForLocalRingsOfOneRecordSize) {
  testing::LocalFlow fast(latency_spec("on", 2).spec());
  auto out = fast.source<Rec>(0);
  auto in = fast.target<Rec>(0);
  ASSERT_EQ(out.push_to(0, Rec{1, 1}), Status::kOk);
  auto b = in.try_consume();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].key, 1u);
  EXPECT_EQ(reading("on", detail::counters::Role::kSource).segments, 0u)
      << "counted only when the slow path runs: the push took the fast path";

  // Bandwidth mode and byte records keep the slow path.
  auto bw = shuffle<Rec>("off").sources(testing::slots(1)).targets(testing::slots(1));
  testing::LocalFlow slow(bw.spec());
  auto out2 = slow.source<Rec>(0);
  ASSERT_EQ(out2.push(Rec{1, 1}), Status::kOk);
  ASSERT_EQ(out2.close(), Status::kOk);
  auto bytes = shuffle<Bytes>("bytes")
                   .sources(testing::slots(1))
                   .targets(testing::slots(1))
                   .optimize(Optimize::kLatency);
  testing::LocalFlow by(bytes.spec());
  auto bin = by.target<Bytes>(0);
  auto bout = by.source<Bytes>(0);
  const std::byte one[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  ASSERT_EQ(bout.push_to(0, one), Status::kOk);
  auto rb = bin.try_consume();
  ASSERT_TRUE(rb);
  size_t n = 0;
  for (auto rec : *rb) {
    EXPECT_EQ(rec.size(), 3u);
    ++n;
  }
  EXPECT_EQ(n, 1u);
}

TEST(LatencyFastTest, ThreeSourcesTakeTurnsInOrderThenEndOfFlow) {
  testing::LocalFlow flow(latency_spec("turns", 3).spec());
  std::vector<Source<Rec>> outs;
  for (uint32_t s = 0; s < 3; ++s) outs.push_back(flow.source<Rec>(s));
  auto in = flow.target<Rec>(0);
  constexpr uint64_t kPerSource = 500;  // many times round a ring of 64
  std::vector<uint64_t> next(3, 0);
  uint64_t got = 0;
  for (uint64_t i = 0; i < kPerSource; ++i) {
    for (uint32_t s = 0; s < 3; ++s) ASSERT_EQ(outs[s].push_to(0, Rec{s, i}), Status::kOk);
    // Three segments ready, one per ring: consumed in turn, each once.
    for (uint32_t k = 0; k < 3; ++k) {
      auto b = in.try_consume();
      ASSERT_TRUE(b) << i;
      ASSERT_EQ(b->size(), 1u);
      const uint32_t s = in.last_source();
      EXPECT_EQ((*b)[0].key, s);
      EXPECT_EQ((*b)[0].value, next[s]++) << "source " << s;
      ++got;
    }
    EXPECT_FALSE(in.try_consume());
    EXPECT_EQ(in.status(), Status::kWouldBlock);
  }
  for (auto& o : outs) ASSERT_EQ(o.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_EQ(got, 3 * kPerSource);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(next[s], kPerSource);
  // What the fast paths moved is counted once the slow paths ran.
  EXPECT_EQ(reading("turns", detail::counters::Role::kTarget).bytes, got * sizeof(Rec));
  uint64_t sent = 0;
  for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
    if (r.flow == "turns" && r.role == detail::counters::Role::kSource) sent += r.bytes;
  }
  EXPECT_EQ(sent, got * sizeof(Rec));
}

TEST(LatencyFastTest, ARingFullOfUnconsumedRecordsBackPressuresThenCreditReturns) {
  auto spec = latency_spec("credit", 1).ring_segments(4);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  uint64_t pushed = 0;
  while (out.try_push_to(0, Rec{pushed, pushed}) == Status::kOk) ++pushed;
  EXPECT_EQ(pushed, 4u);
  EXPECT_EQ(out.try_push_to(0, Rec{}), Status::kWouldBlock);
  // Credit comes back every S/2 = 2 released segments: the first consume
  // holds segment 0, the second releases it, the third releases segment 1.
  for (uint64_t k = 0; k < 3; ++k) {
    auto b = in.try_consume();
    ASSERT_TRUE(b);
    EXPECT_EQ((*b)[0].key, k);
  }
  EXPECT_EQ(out.try_push_to(0, Rec{pushed, pushed}), Status::kOk);
  ++pushed;
  EXPECT_EQ(out.try_push_to(0, Rec{pushed, pushed}), Status::kOk);
  ++pushed;
  EXPECT_EQ(out.try_push_to(0, Rec{}), Status::kWouldBlock);
  ASSERT_EQ(out.close(Deadline::min()), Status::kWouldBlock) << "no room for the END yet";
  uint64_t next = 3;
  while (auto b = in.consume(Clock::now() + std::chrono::seconds(10))) {
    EXPECT_EQ((*b)[0].key, next++);
    if (next == pushed) {
      ASSERT_EQ(out.close(), Status::kOk);
    }
  }
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  EXPECT_EQ(next, pushed);
  EXPECT_EQ(out.push_to(0, Rec{}), Status::kClosed)
      << "a closed source takes no record, fast or slow";
}

TEST(LatencyFastTest, AFailedSourceTakesNoMoreRecordsOnTheFastPath) {
  auto spec = shuffle<Rec>("lost").sources({{0, 0}}).targets({{1, 0}}).ring_segments(2).optimize(
      Optimize::kLatency);
  control::PeerTable peers(2);
  testing::LocalFlow flow(spec.spec(), &peers);
  auto out = flow.source<Rec>(0);
  peers.set(1, control::PeerTable::kDied, "no heartbeat for 5000 ms");
  Status s = Status::kOk;
  int pushed = 0;
  for (; pushed < 100 && s == Status::kOk; ++pushed)
    s = out.push(Rec{}, Clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s, Status::kPeerLost);
  EXPECT_EQ(pushed, 3)
      << "two records fill the ring; the third waits for credit and learns of the loss";
  // The ring's credit could come back now (nothing reads it, but a
  // fast path that ignored the failure would not even look).
  EXPECT_EQ(out.push(Rec{}), Status::kPeerLost);
  EXPECT_NE(out.error().find("rank 1"), std::string::npos) << out.error();
}

TEST(LatencyFastTest, ATargetDestroyedHoldingAFastSegmentHandsItBack) {
  auto spec = latency_spec("held", 1).ring_segments(2);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  {
    auto in = flow.target<Rec>(0);
    ASSERT_EQ(out.push_to(0, Rec{1, 1}), Status::kOk);
    ASSERT_EQ(out.push_to(0, Rec{2, 2}), Status::kOk);
    ASSERT_TRUE(in.try_consume());
    ASSERT_TRUE(in.try_consume());  // holds segment 1; segment 0 released, credit not yet returned
  }
  // Destroyed before our END: the source learns it instead of waiting.
  const Status s = out.push_to(0, Rec{3, 3}, Clock::now() + std::chrono::seconds(10));
  if (s == Status::kOk) {
    EXPECT_NE(out.close(), Status::kOk);
  } else {
    EXPECT_EQ(s, Status::kPeerLost);
  }
  EXPECT_NE(out.error().find("destroyed"), std::string::npos) << out.error();
}

// A record of 64 B (56 before its last word), its fields derived from its
// number so that a torn or stale read shows.
template <size_t N>
struct Wide {
  uint64_t w[N / 8];
};
template <size_t N>
Wide<N> wide(uint64_t i, bool tail_empty) {
  Wide<N> r;
  for (size_t j = 0; j + 1 < N / 8; ++j) r.w[j] = i * 0x9e3779b97f4a7c15ULL + j;
  r.w[N / 8 - 1] = tail_empty ? detail::layout::kTailEmpty : i;
  return r;
}

TEST(LatencyFastTest, OnlyLatencyShuffleFlowsOf56Or64ByteRecordsPublishByTheLastWord) {
  auto lat = [](auto spec) { return spec.optimize(Optimize::kLatency).spec(); };
  auto ends = [](auto spec) { return spec.sources(testing::slots(1)).targets(testing::slots(1)); };
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<64>>("a"))), 64), 56u);
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<56>>("a"))), 64), 48u);
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<48>>("a"))), 64), 0u)
      << "48 B and its footer share a line: the footer publishes";
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<72>>("a"))), 64), 0u);
  EXPECT_EQ(detail::latency_tail_offset(ends(shuffle<Wide<64>>("a")).spec(), 16), 0u)
      << "Bandwidth mode";
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(replicate<Wide<64>>("a"))), 64), 0u);
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<64>>("a"))), 48), 0u)
      << "a ring that is not a power of two has no fast path";
  EXPECT_EQ(detail::latency_tail_offset(lat(ends(shuffle<Wide<64>>("a")).segment_bytes(128)), 64),
            0u)
      << "room for two records a segment";
}

// The tail word's life in one ring: empty when laid out, the record's last
// word once pushed, empty again once released; records whose last word is
// the empty value go by their footer; fast and slow paths (a ring of four,
// kept full, so that pushes wait for credit and take the slow path) hand
// every record over once, in order and whole.
template <size_t N>
void tail_round_trips(const char* name) {
  auto spec = shuffle<Wide<N>>(name)
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .explicit_targets()
                  .ring_segments(4)
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  const detail::layout::RingView ring = flow.ring(0, 0);
  auto tail = [&](uint64_t k) {
    uint64_t v;
    std::memcpy(&v, ring.payload(k) + N - 8, 8);
    return v;
  };
  for (uint64_t k = 0; k < 4; ++k) ASSERT_EQ(tail(k), detail::layout::kTailEmpty) << k;
  auto out = flow.source<Wide<N>>(0);
  auto in = flow.target<Wide<N>>(0);
  constexpr uint64_t kRecords = 1000;
  uint64_t pushed = 0, next = 0;
  while (next < kRecords) {
    // Fill the ring (the first pushes of a round find credit; the rest wait for none).
    while (pushed < kRecords && out.try_push_to(0, wide<N>(pushed, pushed % 3 == 0)) == Status::kOk)
      ++pushed;
    auto b = in.try_consume();
    ASSERT_TRUE(b) << next << ": " << in.error();
    ASSERT_EQ(b->size(), 1u);
    const Wide<N> want = wide<N>(next, next % 3 == 0);
    ASSERT_EQ(std::memcmp(&(*b)[0], &want, N), 0) << "record " << next;
    if (next > 0) {
      EXPECT_EQ(tail(next - 1), detail::layout::kTailEmpty) << "released: " << next - 1;
    }
    ++next;
  }
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow) << in.error();
  EXPECT_EQ(pushed, kRecords);
}

TEST(LatencyFastTest, A64ByteRecordIsPublishedByItsLastWordAndEmptiedOnRelease) {
  tail_round_trips<64>("tail64");
}

TEST(LatencyFastTest, A56ByteRecordIsPublishedByItsLastWordAndEmptiedOnRelease) {
  tail_round_trips<56>("tail56");
}

// The target takes a record as soon as its last word lands, before any
// footer: written here by hand, as a source's stores would arrive.
TEST(LatencyFastTest, TheTargetTakesARecordWhoseLastWordLandedBeforeItsFooter) {
  auto spec = shuffle<Wide<64>>("early")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  const detail::layout::RingView ring = flow.ring(0, 0);
  auto in = flow.target<Wide<64>>(0);
  EXPECT_FALSE(in.try_consume());
  const Wide<64> r = wide<64>(7, false);
  std::memcpy(ring.payload(0), &r, 56);
  EXPECT_FALSE(in.try_consume()) << "the body alone publishes nothing";
  std::memcpy(ring.payload(0) + 56, &r.w[7], 8);
  auto b = in.try_consume();
  ASSERT_TRUE(b);
  EXPECT_EQ(std::memcmp(&(*b)[0], &r, 64), 0);
  EXPECT_EQ(ring.footer(0)->seq.load(), 0u) << "no footer was written";
  EXPECT_FALSE(in.try_consume());
  uint64_t t;
  std::memcpy(&t, ring.payload(0) + 56, 8);
  EXPECT_EQ(t, detail::layout::kTailEmpty) << "released by the second call";
}

}  // namespace
}  // namespace sluice
