#include <gtest/gtest.h>

#include <vector>

#include "sluice/flow.h"
#include "sluice/hash.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

struct Routed {
  uint32_t other;
  uint64_t key;
};

// Distribution of `n` keys produced by `key_of(i)` over `targets` targets: the
// largest deviation from the mean, relative to it.
template <class F>
double max_skew(uint32_t targets, uint64_t n, F key_of) {
  std::vector<uint64_t> counts(targets, 0);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t k = key_of(i);
    ++counts[reduce_hash(hash_bytes(std::as_bytes(std::span(&k, 1))), targets)];
  }
  const double mean = static_cast<double>(n) / targets;
  double worst = 0;
  for (uint64_t c : counts) worst = std::max(worst, std::abs(c - mean) / mean);
  return worst;
}

TEST(RoutingTest, SequentialKeysSpreadEvenly) {
  EXPECT_LT(max_skew(8, 1 << 20, [](uint64_t i) { return i; }), 0.02);
  EXPECT_LT(max_skew(7, 1 << 20, [](uint64_t i) { return i; }), 0.02);
}

TEST(RoutingTest, KeysThatAreMultiplesOfTheTargetCountStillSpread) {
  // Modulo of the raw key would send all of these to target 0.
  EXPECT_LT(max_skew(8, 1 << 20, [](uint64_t i) { return i * 8; }), 0.02);
  EXPECT_LT(max_skew(16, 1 << 20, [](uint64_t i) { return i << 32; }), 0.02);
}

TEST(RoutingTest, ReduceStaysInRange) {
  for (uint32_t n : {1u, 2u, 3u, 1000u}) {
    for (uint64_t h : {0ULL, 1ULL, ~0ULL, 0x8000000000000000ULL}) EXPECT_LT(reduce_hash(h, n), n);
  }
}

TEST(RoutingTest, ShortKeysHashLikeTheirZeroExtendedValue) {
  uint32_t k32 = 12345;
  uint64_t k64 = 12345;
  EXPECT_EQ(hash_bytes(std::as_bytes(std::span(&k32, 1))),
            hash_bytes(std::as_bytes(std::span(&k64, 1))));
}

TEST(RoutingTest, KeyFieldRoutingDependsOnlyOnTheKey) {
  auto spec =
      shuffle<Routed>("r").sources(testing::slots(1)).targets(testing::slots(5)).key(&Routed::key);
  EXPECT_EQ(spec.spec().key_offset(), offsetof(Routed, key));
  EXPECT_EQ(spec.spec().key_size(), 8u);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Routed>(0);
  for (uint64_t k = 0; k < 1000; ++k) {
    Routed a{1, k}, b{999, k};
    EXPECT_EQ(out.target_of(a), out.target_of(b));
    EXPECT_EQ(out.target_of(a), reduce_hash(hash64(k), 5));
  }
  (void)out.close();
}

TEST(RoutingTest, RouteFunctionAndExplicitTargets) {
  auto spec = shuffle<Routed>("r")
                  .sources(testing::slots(1))
                  .targets(testing::slots(4))
                  .route([](const Routed& r, uint32_t n) { return r.other % n; });
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Routed>(0);
  EXPECT_EQ(out.target_of(Routed{6, 0}), 2u);
  (void)out.close();

  auto spec2 =
      shuffle<Routed>("e").sources(testing::slots(1)).targets(testing::slots(4)).explicit_targets();
  testing::LocalFlow flow2(spec2.spec());
  auto out2 = flow2.source<Routed>(0);
  EXPECT_EQ(out2.push(Routed{}),
            Status::kInvalid);  // push() needs a route; explicit flows use push_to
  EXPECT_NE(out2.error().find("push_to"), std::string::npos);
  EXPECT_EQ(out2.push_to(4, Routed{}), Status::kInvalid);
  EXPECT_EQ(out2.push_to(3, Routed{}), Status::kOk);
  EXPECT_EQ(out2.close(), Status::kOk);
  for (uint32_t t = 0; t < 4; ++t) {
    auto in = flow2.target<Routed>(t);
    size_t n = 0;
    while (auto b = in.consume()) n += b->size();
    EXPECT_EQ(in.status(), Status::kEndOfFlow);
    EXPECT_EQ(n, t == 3 ? 1u : 0u);
  }
}

}  // namespace
}  // namespace sluice
