// The join's in-memory parts, in one process: the generator, the partition
// buffers, the hash tables, and the two single-threaded joins against a
// nested-loop join.
#include "local_join.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <vector>

#include "data.h"

namespace sluice::join {
namespace {

template <class T>
JoinResult nested_loop_join(const std::vector<T>& r, const std::vector<T>& s) {
  JoinResult out;
  for (const T& a : r) {
    for (const T& b : s) {
      if (a.key == b.key) {
        ++out.matches;
        out.checksum += pair_checksum(a.key, payload_of(a), payload_of(b));
      }
    }
  }
  return out;
}

DataSpec small_spec(uint64_t r, uint64_t s) {
  DataSpec d;
  d.r_tuples = r;
  d.s_tuples = s;
  return d;
}

template <class T>
void expect_all_joins_agree(const DataSpec& d) {
  const auto r = generate_rows<T>(d, Relation::kR, 0, d.r_tuples, 2);
  const auto s = generate_rows<T>(d, Relation::kS, 0, d.s_tuples, 2);
  const JoinResult expected = nested_loop_join(r, s);
  EXPECT_EQ(hash_join<T>(r, s), expected);
  EXPECT_EQ(radix_join<T>(r, s, nullptr), expected);
  // Swapped roles (S smaller than R) must give the same R-S pairs.
  EXPECT_EQ(
      radix_join<T>(std::span<const T>(r), std::span<const T>(s).first(s.size() / 3), nullptr),
      nested_loop_join(r, std::vector<T>(s.begin(), s.begin() + static_cast<long>(s.size() / 3))));
}

TEST(LocalJoinTest, HashAndRadixJoinsAgreeWithANestedLoopJoin) {
  DataSpec d = small_spec(3000, 5000);
  d.r_keys = RKeys::kDist;
  d.domain = 700;  // duplicates on both sides
  expect_all_joins_agree<Tuple16>(d);
  expect_all_joins_agree<Tuple8>(d);
  d.dist = KeyDist::kZipf;
  d.theta = 1.2;
  expect_all_joins_agree<Tuple16>(d);
  d.selectivity = 0.3;
  expect_all_joins_agree<Tuple16>(d);
}

TEST(LocalJoinTest, RadixJoinUsesManySubPartitionsForALargeBuildSide) {
  EXPECT_EQ(choose_fanout_bits(1000, 16), 0u);
  EXPECT_GT(choose_fanout_bits(1'000'000, 16), 4u);
  EXPECT_LE(choose_fanout_bits(uint64_t{1} << 40, 16), kMaxFanoutBits);
  DataSpec d = small_spec(200000, 300000);
  const auto r = generate_rows<Tuple16>(d, Relation::kR, 0, d.r_tuples, 2);
  const auto s = generate_rows<Tuple16>(d, Relation::kS, 0, d.s_tuples, 2);
  EXPECT_EQ(radix_join<Tuple16>(r, s, nullptr), hash_join<Tuple16>(r, s));
  EXPECT_EQ(hash_join<Tuple16>(r, s).matches, 300000u);  // unique R keys, selectivity 1
}

TEST(LocalJoinTest, PartitionBuffersKeepEveryTupleWhenOnePartitionTakesAll) {
  PartitionBuffers<Tuple16> parts(4, 100);  // estimate far too small, and all in one partition
  for (uint64_t i = 0; i < 50000; ++i) parts.add(Tuple16{42, i}, 0x3);
  EXPECT_EQ(parts.size(3), 50000u);
  EXPECT_EQ(parts.total(), 50000u);
  EXPECT_GT(parts.arena_blocks_added(), 0u);
  uint64_t next = 0;
  bool in_order = true;
  parts.for_each_chunk(3, [&](std::span<const Tuple16> c) {
    for (const Tuple16& t : c) in_order &= t.payload == next++;
  });
  EXPECT_TRUE(in_order);
  EXPECT_EQ(next, 50000u);
}

// The cheap key hash must still spread keys that a user's file may hold
// (sequential, or differing only in their high bits) evenly over the
// network partitions (top bits) and the sub-partitions (low bits).
TEST(KeyHashTest, SpreadsSequentialAndHighBitKeysEvenly) {
  for (int shift : {0, 20, 40}) {
    std::vector<uint64_t> targets(12, 0), subs(256, 0);
    const uint64_t n = 1 << 20;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t h = key_hash(i << shift);
      ++targets[network_partition(h, 12)];
      ++subs[h & 255];
    }
    for (uint64_t c : targets) EXPECT_NEAR(c, n / 12.0, n / 12.0 * 0.05) << "shift " << shift;
    for (uint64_t c : subs) EXPECT_NEAR(c, n / 256.0, n / 256.0 * 0.15) << "shift " << shift;
  }
}

TEST(GeneratorTest, RowsDoNotDependOnHowTheRelationIsSplit) {
  DataSpec d = small_spec(10000, 10000);
  d.dist = KeyDist::kZipf;
  d.selectivity = 0.7;
  const auto whole = generate_rows<Tuple16>(d, Relation::kS, 0, 10000, 1);
  std::vector<Tuple16> pieces;
  for (uint64_t p = 0; p < 7; ++p) {
    const auto part = generate_rows<Tuple16>(d, Relation::kS, part_begin(10000, 7, p),
                                             part_begin(10000, 7, p + 1), 3);
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  ASSERT_EQ(pieces.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(pieces[i].key, whole[i].key) << i;
    ASSERT_EQ(pieces[i].payload, whole[i].payload) << i;
  }
}

TEST(GeneratorTest, UniqueRKeysAreDistinctAndUnmatchedSKeysMissR) {
  DataSpec d = small_spec(20000, 20000);
  d.selectivity = 0;
  const auto r = generate_rows<Tuple8>(d, Relation::kR, 0, d.r_tuples, 2);
  const auto s = generate_rows<Tuple8>(d, Relation::kS, 0, d.s_tuples, 2);
  std::set<uint64_t> keys;
  for (const auto& t : r) keys.insert(t.key);
  EXPECT_EQ(keys.size(), r.size());
  for (const auto& t : s) ASSERT_EQ(keys.count(t.key), 0u);
}

TEST(GeneratorTest, ZipfFrequenciesFollowThePowerLaw) {
  for (double theta : {0.5, 1.0, 1.5}) {
    DataSpec d = small_spec(1000, 400000);  // domain 1000
    d.dist = KeyDist::kZipf;
    d.theta = theta;
    const KeyGenerator keys(d);
    std::vector<uint64_t> count(3, 0);
    for (uint64_t i = 0; i < d.s_tuples; ++i) {
      const uint64_t k = keys.s_key(i);
      for (uint64_t x = 0; x < 3; ++x) count[x] += k == keys.key_of(x);
    }
    double h = 0;
    for (int i = 1; i <= 1000; ++i) h += std::pow(i, -theta);
    for (uint64_t x = 0; x < 3; ++x) {
      const double expected = d.s_tuples * std::pow(x + 1.0, -theta) / h;
      EXPECT_NEAR(count[x], expected, 5 * std::sqrt(expected) + 0.01 * expected)
          << "theta " << theta << " rank " << x;
    }
  }
}

TEST(GeneratorTest, UniformKeysCoverTheDomainEvenly) {
  DataSpec d = small_spec(10, 100000);  // domain 10
  const KeyGenerator keys(d);
  std::vector<uint64_t> count(10, 0);
  for (uint64_t i = 0; i < d.s_tuples; ++i) {
    const uint64_t k = keys.s_key(i);
    for (uint64_t x = 0; x < 10; ++x) count[x] += k == keys.key_of(x);
  }
  for (uint64_t c : count) EXPECT_NEAR(c, 10000.0, 600.0);
}

}  // namespace
}  // namespace sluice::join
