// The analytics' pieces in one process: the generator keeps its promises
// (selectivity, key uniqueness, slices that cover every row exactly once),
// the reference join and aggregation agree with brute force on small
// inputs, and the partition store's layout never overlaps.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "olap.h"
#include "part_store.h"

namespace so = sluice::nam::olap;

namespace {

TEST(OlapUnitTest, SharesOfEachRelationWithAPartnerFollowTheSelectivity) {
  for (double selectivity : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    so::JoinInput in{20000, 20000, selectivity, 7};
    std::set<uint64_t> r_keys, s_keys;
    for (uint64_t i = 0; i < in.r_rows; ++i) r_keys.insert(so::r_row(in, i).key);
    for (uint64_t j = 0; j < in.s_rows; ++j) s_keys.insert(so::s_row(in, j).key);
    EXPECT_EQ(r_keys.size(), in.r_rows) << "R keys are unique";
    EXPECT_EQ(s_keys.size(), in.s_rows) << "S keys are unique when |S| = |R|";
    uint64_t r_with = 0;
    for (uint64_t k : r_keys) r_with += s_keys.count(k);
    EXPECT_NEAR(static_cast<double>(r_with) / in.r_rows, selectivity, 0.02) << selectivity;
  }
}

TEST(OlapUnitTest, ReferenceJoinAgreesWithBruteForce) {
  // |S| > |R|: some R keys have two partners.
  const so::JoinInput in{300, 700, 0.6, 3};
  uint64_t matches = 0, checksum = 0;
  for (uint64_t i = 0; i < in.r_rows; ++i) {
    const so::Tuple r = so::r_row(in, i);
    for (uint64_t j = 0; j < in.s_rows; ++j) {
      const so::Tuple s = so::s_row(in, j);
      if (r.key != s.key) continue;
      ++matches;
      checksum += so::pair_hash(r.key, r.payload, s.payload);
    }
  }
  const so::JoinResult ref = so::reference_join(in);
  EXPECT_EQ(ref.matches, matches);
  EXPECT_EQ(ref.checksum, checksum);
  EXPECT_GT(matches, in.r_rows / 2);
}

TEST(OlapUnitTest, ReferenceAggregationAgreesWithAMap) {
  const so::AggInput in{5000, 37, 9};
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> groups;
  for (uint64_t i = 0; i < in.rows; ++i) {
    const so::Row row = so::agg_row(in, i);
    ASSERT_LT(row.key, in.groups);
    groups[row.key].first += 1;
    groups[row.key].second += row.value;
  }
  uint64_t checksum = 0;
  for (const auto& [key, g] : groups) checksum += so::group_hash(key, g.first, g.second);
  const so::AggResult ref = so::reference_agg(in);
  EXPECT_EQ(ref.groups, groups.size());
  EXPECT_EQ(ref.rows, in.rows);
  EXPECT_EQ(ref.checksum, checksum);
}

TEST(OlapUnitTest, SlicesAndSharesCoverEveryRowOnce) {
  for (uint64_t rows : {0ull, 1ull, 7ull, 1000ull, 12345ull}) {
    for (uint32_t servers : {1u, 2u, 3u}) {
      for (uint32_t workers : {1u, 4u, 5u}) {
        uint64_t next = 0;
        for (uint32_t m = 0; m < servers; ++m) {
          const so::Range slice = so::server_slice(rows, m, servers);
          for (uint32_t w = 0; w < workers; ++w) {
            const so::Range share = so::worker_share(slice, w, workers);
            EXPECT_EQ(share.lo, next);
            next = share.hi;
          }
          EXPECT_EQ(next, slice.hi);
        }
        EXPECT_EQ(next, rows);
      }
    }
  }
}

TEST(OlapUnitTest, StoreLayoutKeepsHeadsAndChunksApart) {
  const so::StoreLayout l =
      so::make_store_layout(3, 5, 10, 2, sizeof(so::Tuple), 2048, 100000, 1.25);
  EXPECT_EQ(l.local_partitions(), 4u);
  EXPECT_EQ(l.records_per_chunk(), (2048u - 16) / 16);
  // Every (relation, local partition) has its own writers' heads, all
  // before the pool, which is 64-byte aligned.
  std::set<uint64_t> heads;
  for (uint32_t r = 0; r < 2; ++r) {
    for (uint32_t p = 0; p < l.local_partitions(); ++p) {
      for (uint32_t w = 0; w < 5; ++w) heads.insert(l.heads_offset(r, p) + 8 * w);
    }
  }
  EXPECT_EQ(heads.size(), 2u * 4 * 5);
  EXPECT_GE(*heads.begin(), so::StoreLayout::kHeads);
  EXPECT_LT(*heads.rbegin() + 8, l.pool_offset() + 1);
  EXPECT_EQ(l.pool_offset() % 64, 0u);
  // A server's pool holds its partitions' share of the records with room.
  const double share = 100000.0 * 4 / 10 / l.records_per_chunk();
  EXPECT_GE(static_cast<double>(l.pool_chunks), share * 1.25);
  EXPECT_EQ(l.bytes(), l.pool_offset() + l.pool_chunks * 2048);
  for (uint32_t p = 0; p < 10; ++p) EXPECT_EQ(l.server_of(p) + 3 * l.local_of(p), p);
  EXPECT_THROW(so::make_store_layout(1, 1, 1, 1, 24, 32, 10, 1.0), so::OlapError);
}

}  // namespace
