// Producers and consumers on real threads at full speed over the shm cores.
// Run under ThreadSanitizer by `make tsan`.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "observe/endpoint_counters.h"
#include "sluice/flow.h"
#include "sluice/hash.h"
#include "support/local_flow.h"
#include "wire/layout.h"

namespace sluice {
namespace {

struct Rec {
  uint64_t key;
  uint64_t value;  // source << 40 | seq
};

uint64_t fp(const Rec& r) { return hash64(r.key ^ hash64(r.value + 1)); }

#if defined(SLUICE_SANITIZED)
constexpr uint64_t kScale = 10;  // sanitizers are ~10x slower
#else
constexpr uint64_t kScale = 1;
#endif

struct Totals {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum{0};
};

// Runs sources x targets threads over one flow; checks exactly-once delivery
// per target and per-source order.
void run_shuffle(ShuffleSpec<Rec> spec, uint32_t nsrc, uint32_t ntgt, uint64_t per_source) {
  spec.sources(testing::slots(nsrc)).targets(testing::slots(ntgt, 1)).key(&Rec::key);
  testing::LocalFlow flow(spec.spec());
  std::vector<Totals> sent(ntgt), received(ntgt);
  std::atomic<uint64_t> order_errors{0};
  std::vector<std::string> errors(nsrc + ntgt);
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < nsrc; ++s) {
    threads.emplace_back([&, s, out = flow.source<Rec>(s)]() mutable {
      std::vector<uint64_t> c(ntgt, 0), sum(ntgt, 0);
      for (uint64_t i = 0; i < per_source; ++i) {
        Rec r{hash64(i * 31 + s), uint64_t{s} << 40 | i};
        const uint32_t t = out.target_of(r);
        if (out.push(r) != Status::kOk) {
          errors[s] = out.error();
          return;
        }
        ++c[t];
        sum[t] += fp(r);
      }
      if (out.close() != Status::kOk) errors[s] = out.error();
      for (uint32_t t = 0; t < ntgt; ++t) {
        sent[t].count += c[t];
        sent[t].sum += sum[t];
      }
    });
  }
  for (uint32_t t = 0; t < ntgt; ++t) {
    threads.emplace_back([&, t, in = flow.target<Rec>(t)]() mutable {
      std::vector<int64_t> last(nsrc, -1);
      uint64_t c = 0, sum = 0;
      while (auto b = in.consume()) {
        for (const Rec& r : *b) {
          const uint64_t src = r.value >> 40;
          const auto seq = static_cast<int64_t>(r.value & ((1ULL << 40) - 1));
          if (src >= nsrc || seq <= last[src])
            ++order_errors;
          else
            last[src] = seq;
          ++c;
          sum += fp(r);
        }
      }
      if (in.status() != Status::kEndOfFlow) errors[nsrc + t] = in.error();
      received[t].count += c;
      received[t].sum += sum;
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(order_errors.load(), 0u);
  uint64_t total = 0;
  for (uint32_t t = 0; t < ntgt; ++t) {
    EXPECT_EQ(received[t].count.load(), sent[t].count.load()) << "target " << t;
    EXPECT_EQ(received[t].sum.load(), sent[t].sum.load()) << "target " << t;
    total += received[t].count;
  }
  EXPECT_EQ(total, per_source * nsrc);
}

TEST(RingConcurrentTest, OneToOneAtFullSpeedDeliversEveryRecordOnceInOrder) {
  run_shuffle(shuffle<Rec>("c11"), 1, 1, 2'000'000 / kScale);
}

TEST(RingConcurrentTest, TinyRingsWrapAroundManyTimes) {
  auto spec = shuffle<Rec>("tiny");
  spec.segment_bytes(32).ring_segments(2);
  run_shuffle(spec, 1, 1, 200'000 / kScale);
}

TEST(RingConcurrentTest, FourSourcesToOneTarget) {
  auto spec = shuffle<Rec>("n1");
  spec.segment_bytes(512).ring_segments(4);
  run_shuffle(spec, 4, 1, 200'000 / kScale);
}

TEST(RingConcurrentTest, ThreeSourcesToThreeTargets) {
  auto spec = shuffle<Rec>("nm");
  spec.segment_bytes(1024).ring_segments(8);
  run_shuffle(spec, 3, 3, 200'000 / kScale);
}

TEST(RingConcurrentTest, LatencyModeOneRecordPerSegment) {
  auto spec = shuffle<Rec>("lat");
  spec.optimize(Optimize::kLatency);
  run_shuffle(spec, 2, 2, 50'000 / kScale);
}

// Latency-mode records of 56 and 64 B, whose last word publishes them in
// their own line (layout.h): every word of every record is checked, so a
// target that took a record before its body landed (or a slot's stale
// record) fails; every fifth record ends in the empty tail value and goes
// by its footer. Small rings keep sources waiting for credit (the slow
// path writes too).
template <size_t N>
struct Wide {
  uint64_t w[N / 8];  // w[0]: source << 40 | seq; the rest derived from it
};
template <size_t N>
Wide<N> wide(uint32_t s, uint64_t i) {
  Wide<N> r;
  r.w[0] = uint64_t{s} << 40 | i;
  for (size_t j = 1; j + 1 < N / 8; ++j) r.w[j] = hash64(r.w[0] + j);
  r.w[N / 8 - 1] = i % 5 == 0 ? detail::layout::kTailEmpty : hash64(r.w[0]);
  return r;
}

template <size_t N>
void run_wide(uint32_t nsrc, uint32_t ntgt, uint64_t per_source, uint32_t ring_segments) {
  auto spec = shuffle<Wide<N>>("wide")
                  .sources(testing::slots(nsrc))
                  .targets(testing::slots(ntgt, 1))
                  .explicit_targets()
                  .ring_segments(ring_segments)
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  std::atomic<uint64_t> received{0}, bad{0};
  std::vector<std::string> errors(nsrc + ntgt);
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < nsrc; ++s) {
    threads.emplace_back([&, s, out = flow.template source<Wide<N>>(s)]() mutable {
      for (uint64_t i = 0; i < per_source; ++i) {
        if (out.push_to(static_cast<uint32_t>(i % ntgt), wide<N>(s, i)) != Status::kOk) {
          errors[s] = out.error();
          return;
        }
      }
      if (out.close() != Status::kOk) errors[s] = out.error();
    });
  }
  for (uint32_t t = 0; t < ntgt; ++t) {
    threads.emplace_back([&, t, in = flow.template target<Wide<N>>(t)]() mutable {
      std::vector<uint64_t> next(nsrc, t);
      uint64_t c = 0, wrong = 0;
      while (auto b = in.consume()) {
        for (const Wide<N>& r : *b) {
          const uint64_t src = r.w[0] >> 40;
          const Wide<N> want = wide<N>(static_cast<uint32_t>(src), next[src < nsrc ? src : 0]);
          if (src >= nsrc || std::memcmp(&r, &want, N) != 0) {
            ++wrong;
          } else {
            next[src] += ntgt;
          }
          ++c;
        }
      }
      if (in.status() != Status::kEndOfFlow) errors[nsrc + t] = in.error();
      received += c;
      bad += wrong;
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(bad.load(), 0u) << "records torn, stale, out of order or duplicated";
  EXPECT_EQ(received.load(), per_source * nsrc);
}

TEST(RingConcurrentTest, LatencyRecordsOf64BytesPublishedByTheirLastWord) {
  run_wide<64>(2, 2, 200'000 / kScale, 4);
  run_wide<64>(1, 1, 200'000 / kScale, 64);
}

TEST(RingConcurrentTest, LatencyRecordsOf56BytesPublishedByTheirLastWord) {
  run_wide<56>(2, 1, 200'000 / kScale, 2);
}

// How often the targets of the round trips' flows parked so far.
uint64_t round_trip_parks() {
  uint64_t parks = 0;
  for (const detail::counters::Reading& r : detail::counters::snapshot(0)) {
    if ((r.flow == "ping" || r.flow == "pong") && r.role == detail::counters::Role::kTarget)
      parks += r.parks;
  }
  return parks;
}

// Round trips between two threads through two Latency-mode flows with no
// spinning: a consume that finds nothing yields, then parks on the
// doorbell, and the inline push must wake it (its exchange against the
// parking fence). Now and then the echo holds its answer until the
// initiator has parked (or a second passed), so that parking happens however
// slowly a loaded machine runs the yields. A lost wake-up shows as a stall
// of a park slice; every record must still come back once, in order.
TEST(RingConcurrentTest, LatencyRoundTripsWakeParkedConsumers) {
  auto ping = shuffle<Rec>("ping")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1, 1))
                  .optimize(Optimize::kLatency);
  auto pong = shuffle<Rec>("pong")
                  .sources(testing::slots(1, 1))
                  .targets(testing::slots(1))
                  .optimize(Optimize::kLatency);
  testing::LocalFlow there(ping.spec(), nullptr, /*spin=*/0),
      back(pong.spec(), nullptr, /*spin=*/0);
  const uint64_t n = 20'000 / kScale;
  std::string echo_error;
  std::thread echo([&, in = there.target<Rec>(0), out = back.source<Rec>(0)]() mutable {
    while (auto b = in.consume()) {
      for (const Rec& r : *b) {
        // Now and then until the other side stopped yielding and parked.
        if (r.key % 200 == 199) {
          const uint64_t before = round_trip_parks();
          const auto give_up = Clock::now() + std::chrono::seconds(1);
          while (round_trip_parks() == before && Clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (out.push(Rec{r.key, r.value + 1}) != Status::kOk) echo_error = out.error();
      }
    }
    if (in.status() != Status::kEndOfFlow) echo_error = in.error();
    if (out.close() != Status::kOk) echo_error = out.error();
  });
  auto out = there.source<Rec>(0);
  auto in = back.target<Rec>(0);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out.push(Rec{i, 2 * i}), Status::kOk);
    auto b = in.consume();
    ASSERT_TRUE(b) << in.error();
    ASSERT_EQ(b->size(), 1u);
    wrong += (*b)[0].key != i || (*b)[0].value != 2 * i + 1;
  }
  ASSERT_EQ(out.close(), Status::kOk);
  EXPECT_FALSE(in.consume());
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  echo.join();
  EXPECT_EQ(echo_error, "");
  EXPECT_EQ(wrong, 0u);
  const uint64_t parks = round_trip_parks();
  std::printf("targets parked %llu times in %llu round trips\n",
              static_cast<unsigned long long>(parks), static_cast<unsigned long long>(n));
  EXPECT_GT(parks, 0u) << "the pauses should have made the initiator park";
}

TEST(RingConcurrentTest, VariableLengthRecordsSurviveConcurrentWrapAround) {
  auto spec = shuffle<Bytes>("bytes")
                  .sources(testing::slots(2))
                  .targets(testing::slots(1, 1))
                  .segment_bytes(256)
                  .ring_segments(3);
  testing::LocalFlow flow(spec.spec());
  const uint64_t n = 100'000 / kScale;
  std::atomic<uint64_t> bad{0}, got{0};
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < 2; ++s) {
    threads.emplace_back([&, s, out = flow.source<Bytes>(s)]() mutable {
      std::byte buf[200];
      for (uint64_t i = 0; i < n; ++i) {
        const size_t len = (i * 7 + s) % 200;
        for (size_t j = 0; j < len; ++j) buf[j] = static_cast<std::byte>(i + j);
        if (out.push(std::span<const std::byte>(buf, len)) != Status::kOk) ++bad;
      }
      if (out.close() != Status::kOk) ++bad;
    });
  }
  threads.emplace_back([&, in = flow.target<Bytes>(0)]() mutable {
    std::vector<uint64_t> next(2, 0);
    while (auto b = in.consume()) {
      const uint32_t s = in.last_source();
      for (auto rec : *b) {
        const uint64_t i = next[s]++;
        const size_t len = (i * 7 + s) % 200;
        if (rec.size() != len) {
          ++bad;
          continue;
        }
        for (size_t j = 0; j < len; ++j) bad += rec[j] != static_cast<std::byte>(i + j);
        ++got;
      }
    }
    if (in.status() != Status::kEndOfFlow) ++bad;
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(got.load(), 2 * n);
}

}  // namespace
}  // namespace sluice
