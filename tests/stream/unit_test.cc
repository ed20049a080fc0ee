// The stream library's pieces in-process: window assignment and the
// lateness rule, the state table, the aggregates, the Zipf sampler, the
// generators (deterministic, disjoint per worker), and the report's wire
// form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "stream/aggregates.h"
#include "stream/cells.h"
#include "stream/nexmark.h"
#include "stream/report.h"
#include "stream/state_table.h"
#include "stream/window.h"
#include "stream/workloads.h"

namespace ss = sluice::stream;

namespace {

std::vector<int64_t> windows_of(const ss::WindowSpec& w, int64_t t) {
  std::vector<int64_t> v;
  w.for_each(t, [&](int64_t s) { v.push_back(s); });
  return v;
}

TEST(WindowTest, TumblingSlidingAndGlobalWindowsHoldTheRightTimes) {
  EXPECT_EQ(windows_of(ss::WindowSpec::tumbling(1000), 0), std::vector<int64_t>{0});
  EXPECT_EQ(windows_of(ss::WindowSpec::tumbling(1000), 999), std::vector<int64_t>{0});
  EXPECT_EQ(windows_of(ss::WindowSpec::tumbling(1000), 1000), std::vector<int64_t>{1000});
  EXPECT_EQ(windows_of(ss::WindowSpec::tumbling(1000), -1), std::vector<int64_t>{-1000});
  EXPECT_EQ(windows_of(ss::WindowSpec::sliding(400, 100), 250),
            (std::vector<int64_t>{-100, 0, 100, 200}));
  EXPECT_EQ(windows_of(ss::WindowSpec::global(), 123456), std::vector<int64_t>{0});
  EXPECT_EQ(ss::WindowSpec::global().end(0), ss::kEndOfTime);
  EXPECT_THROW(ss::WindowSpec::sliding(1000, 300).validate(), std::invalid_argument);
  EXPECT_THROW(ss::WindowSpec::sliding(100, 200).validate(), std::invalid_argument);
}

TEST(WindowTest, ARecordIsLateOnlyOnceTheWatermarkPassedItsWindowsEndPlusLateness) {
  const auto w = ss::WindowSpec::tumbling(1000);
  EXPECT_FALSE(ss::is_late(w, 0, ss::kNoWatermark, 0));
  EXPECT_FALSE(ss::is_late(w, 0, 999, 0));
  EXPECT_TRUE(ss::is_late(w, 0, 1000, 0));
  EXPECT_FALSE(ss::is_late(w, 0, 1049, 50));
  EXPECT_TRUE(ss::is_late(w, 0, 1050, 50));
  EXPECT_FALSE(ss::is_late(ss::WindowSpec::global(), 0, ss::kMaxEventTime, 0));
  EXPECT_EQ(ss::watermark_of(ss::kNoWatermark, 10), ss::kNoWatermark);
  EXPECT_EQ(ss::watermark_of(500, 10), 490);
}

TEST(StateTableTest, KeepsEveryKeyThroughGrowthAndClears) {
  ss::StateTable<uint64_t> t(4);
  for (uint64_t k = 0; k < 10000; ++k) {
    for (uint64_t r = 0; r <= k % 3; ++r)
      ++t.upsert(k * 7919, sluice::hash64(k * 7919), [] { return uint64_t{0}; });
  }
  EXPECT_EQ(t.size(), 10000u);
  uint64_t total = 0, n = 0;
  t.for_each([&](uint64_t key, uint64_t c) {
    EXPECT_EQ(c, (key / 7919) % 3 + 1);
    total += c;
    ++n;
  });
  EXPECT_EQ(n, 10000u);
  uint64_t expected = 0;
  for (uint64_t k = 0; k < 10000; ++k) expected += k % 3 + 1;
  EXPECT_EQ(total, expected);
  const size_t bytes = t.bytes();
  t.clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.bytes(), bytes) << "clear keeps the capacity for the next epoch";
}

// take_changed: the entries upserted since the last call (every one with
// `all`), each once; growth keeps the marks.
TEST(StateTableTest, TakeChangedHandsOutWhatWasUpsertedSinceTheLastCall) {
  ss::StateTable<uint64_t> t(4);
  const auto add = [&](uint64_t k) {
    ++t.upsert(k, sluice::hash64(k), [] { return uint64_t{0}; });
  };
  const auto changed = [&](bool all) {
    std::vector<uint64_t> keys;
    t.take_changed(all, [&](uint64_t key, uint64_t) { keys.push_back(key); });
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  for (uint64_t k = 0; k < 100; ++k) add(k);
  EXPECT_EQ(changed(false).size(), 100u);
  EXPECT_TRUE(changed(false).empty());
  add(7);
  add(42);
  add(7);
  EXPECT_EQ(changed(false), (std::vector<uint64_t>{7, 42}));
  add(3);
  for (uint64_t k = 100; k < 1000; ++k) add(k);  // the table grows: 3 stays changed
  const std::vector<uint64_t> after_growth = changed(false);
  EXPECT_EQ(after_growth.size(), 901u);
  EXPECT_EQ(after_growth.front(), 3u);
  EXPECT_EQ(changed(true).size(), 1000u);  // all, changed or not
  EXPECT_TRUE(changed(false).empty());
  EXPECT_NE(t.find(3, sluice::hash64(3)), nullptr);  // (find marks nothing)
  EXPECT_TRUE(changed(false).empty());
  // Each entry handed out with its own state (they go in batches).
  std::map<uint64_t, uint64_t> seen;
  t.take_changed(true, [&](uint64_t key, uint64_t count) { seen[key] = count; });
  ASSERT_EQ(seen.size(), 1000u);
  for (const auto& [k, count] : seen)
    EXPECT_EQ(count, k == 7 ? 3u : (k == 42 || k == 3) ? 2u : 1u) << "key " << k;
}

TEST(AggregateTest, MergingPartialsEqualsFoldingEverything) {
  const std::vector<int64_t> values = {5, -3, 12, 7, 0, 7, 100, -50};
  auto fold = [&](auto agg, size_t split) {
    auto a = agg.init(), b = agg.init();
    for (size_t i = 0; i < values.size(); ++i) agg.add(i < split ? a : b, values[i]);
    agg.merge(b, a);
    return agg.result(b);
  };
  for (size_t split = 0; split <= values.size(); ++split) {
    EXPECT_EQ(fold(ss::Sum<int64_t>{}, split), 78);
    EXPECT_EQ(fold(ss::Min<int64_t>{}, split), -50);
    EXPECT_EQ(fold(ss::Max<int64_t>{}, split), 100);
    EXPECT_DOUBLE_EQ(fold(ss::Avg<int64_t>{}, split), 78.0 / 8);
  }
}

TEST(WindowTest, SessionWindowsValidateAndTheirLatenessRuleIsBehindTheWatermark) {
  const auto s = ss::WindowSpec::session(100);
  EXPECT_TRUE(s.is_session());
  EXPECT_FALSE(s.is_global());
  EXPECT_NO_THROW(s.validate());
  EXPECT_THROW(ss::WindowSpec::session(-5).validate(), std::invalid_argument);
  EXPECT_FALSE(ss::is_late_for_sessions(10, ss::kNoWatermark, 0));
  EXPECT_FALSE(ss::is_late_for_sessions(10, 10, 0));
  EXPECT_TRUE(ss::is_late_for_sessions(10, 11, 0));
  EXPECT_FALSE(ss::is_late_for_sessions(10, 15, 5));
  EXPECT_TRUE(ss::is_late_for_sessions(10, 16, 5));
  EXPECT_EQ(ss::session_late_bucket(250, 100), 200);
  EXPECT_EQ(ss::session_late_bucket(-1, 100), -100);
}

// Folds `items` into cells split at every point (two workers' partials),
// ships one into the other, and returns the results.
template <class Cells, class Rec>
std::multiset<Rec> fold_split(const Cells& cells, const std::vector<Rec>& items, size_t split,
                              bool absorb) {
  typename Cells::Pool pa, pb;
  auto a = cells.init(), b = cells.init();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i < split) {
      cells.add(a, pa, items[i]);
    } else {
      cells.add(b, pb, items[i]);
    }
  }
  if (absorb) {
    // Both in one pool: copy b's list into pa first (as sessions do).
    auto c = cells.init();
    cells.ship(b, pb, [&](const Rec& r) { cells.add(c, pa, r); });
    cells.absorb(a, c, pa);
  } else {
    cells.ship(b, pb, [&](const Rec& r) { cells.take(a, pa, r); });
  }
  std::multiset<Rec> out;
  cells.results(a, pa, [&](const Rec& r) { out.insert(r); });
  return out;
}

TEST(CellsTest, ArgMaxKeepsEveryRecordAtTheMaximumWhateverTheSplit) {
  struct V {
    int64_t v, id;
    auto operator<=>(const V&) const = default;
  };
  const std::vector<V> items = {{3, 0}, {7, 1}, {7, 2}, {1, 3}, {7, 4}, {2, 5}, {7, 6}, {6, 7}};
  ss::ListCells<ss::ArgMaxPolicy<V, int64_t (*)(const V&)>> cells{{[](const V& x) { return x.v; }}};
  const std::multiset<V> want = {{7, 1}, {7, 2}, {7, 4}, {7, 6}};
  for (size_t split = 0; split <= items.size(); ++split) {
    EXPECT_EQ(fold_split(cells, items, split, false), want) << split;
    EXPECT_EQ(fold_split(cells, items, split, true), want) << split;
  }
}

TEST(CellsTest, AJoinCellPairsEveryLeftWithEveryRightWhateverTheSplit) {
  struct E {
    bool right;
    int64_t id;
  };
  auto side = [](const E& e) { return e.right; };
  auto pair = [](const E& l, const E& r) { return l.id * 100 + r.id; };
  ss::ListCells<ss::JoinPolicy<E, decltype(side), decltype(pair)>> cells{{side, pair, {}, {}}};
  const std::vector<E> items = {{false, 1}, {true, 2}, {true, 3}, {false, 4}, {true, 5}};
  for (size_t split = 0; split <= items.size(); ++split) {
    typename decltype(cells)::Pool pa, pb;
    auto a = cells.init(), b = cells.init();
    for (size_t i = 0; i < items.size(); ++i)
      cells.add(i < split ? a : b, i < split ? pa : pb, items[i]);
    cells.ship(b, pb, [&](const E& e) { cells.take(a, pa, e); });
    std::multiset<int64_t> got;
    cells.results(a, pa, [&](int64_t v) { got.insert(v); });
    EXPECT_EQ(got, (std::multiset<int64_t>{102, 103, 105, 402, 403, 405})) << split;
  }
}

TEST(GeneratorTest, NexmarkPersonsHaveUniqueIdsAndOthersReferToRecentPersons) {
  ss::GenSpec spec;
  spec.records = 5000;
  spec.keys = 20;
  spec.rate = 10;
  std::set<uint64_t> persons;
  uint64_t others = 0, total = 0;
  for (uint32_t g = 0; g < 3; ++g) {
    ss::NexmarkSource src(spec, g, 3, ss::kAuctionEvent);
    std::vector<ss::NexmarkEvent> buf(333);
    for (size_t n; (n = src(buf)) != 0;) {
      for (size_t i = 0; i < n; ++i, ++total) {
        const ss::NexmarkEvent& e = buf[i];
        if (e.kind == ss::kPersonEvent) {
          const uint64_t id = e.person.id;
          EXPECT_TRUE(persons.insert(id).second) << "person ids are unique";
        } else {
          ASSERT_EQ(e.kind, ss::kAuctionEvent);
          const uint64_t seller = e.auction.seller;
          EXPECT_LE(seller / 3, total / 5 + 1) << "sellers are persons made so far";
          ++others;
        }
      }
    }
  }
  EXPECT_EQ(total, 5000u);
  EXPECT_EQ(persons.size(), 1002u);  // every fifth record of each worker's 1667 (1666, 1666)
  EXPECT_EQ(others, 5000u - 1002u);
}

TEST(ZipfTest, RankOneIsTheMostFrequentAndFrequenciesFollowThePowerLaw) {
  ss::Zipf z(1000, 1.5);
  uint64_t state = 1;
  auto u01 = [&] {
    state = sluice::hash64(state + 0x9e3779b97f4a7c15ULL);
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  std::map<uint64_t, uint64_t> freq;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t k = z.sample(u01);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, 1000u);
    ++freq[k];
  }
  // P(1) / P(2) = 2^1.5 = 2.83 for theta 1.5.
  const double ratio = static_cast<double>(freq[1]) / static_cast<double>(freq[2]);
  EXPECT_NEAR(ratio, 2.83, 0.2);
  EXPECT_GT(freq[1], freq[10]);
}

TEST(GeneratorTest, WorkersGetDisjointDeterministicPartitionsOfTheInput) {
  ss::GenSpec spec;
  spec.records = 10001;
  spec.keys = 50;
  spec.disorder = 30;
  spec.rate = 10;
  uint64_t total = 0;
  std::set<std::pair<uint64_t, uint64_t>> users;
  for (uint32_t g = 0; g < 3; ++g) {
    ss::YsbSource a(spec, g, 3), b(spec, g, 3);
    std::vector<ss::YsbEvent> x(777), y(777);
    for (;;) {
      const size_t n = a(x), m = b(y);
      ASSERT_EQ(n, m);
      if (n == 0) break;
      total += n;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(ss::YsbEvent)), 0)
            << "the same input every time";
        // Copies: the record is packed, and gtest binds references.
        const ss::YsbEvent e = x[i];
        const uint64_t campaign = e.campaign_id, u0 = e.user_id[0], u1 = e.user_id[1];
        const unsigned type = e.event_type;
        const int64_t time = e.event_time;
        ASSERT_LT(campaign, 50u);
        ASSERT_LE(type, 2u);
        ASSERT_GE(time, 0);
        users.insert({u0, u1});
      }
    }
  }
  EXPECT_EQ(total, 10001u);
  EXPECT_EQ(users.size(), 10001u) << "no two records alike: the workers' partitions are disjoint";
}

// A rank's report sums its workers' (and rank 0's, every rank's): counts
// and checksums add, late counts merge per window, latencies concatenate,
// the time is the slowest one's.
TEST(ReportTest, AddSumsFiguresAndMergesLateCountsPerWindow) {
  ss::Report a, b;
  a.records_in = 12;
  a.rows = 3;
  a.checksum = 0xfedcba9876543210ULL;
  a.late = {{-100, 4}, {2000, 1}};
  a.latency_ms = {0.5, 1.25};
  a.seconds = 1.5;
  a.cpu_seconds = 2;
  b.records_in = 8;
  b.rows = 2;
  b.checksum = 0x0123456789abcdf0ULL;
  b.late = {{2000, 2}, {3000, 7}};
  b.latency_ms = {4};
  b.seconds = 1.25;
  b.cpu_seconds = 1;
  ss::Report total;
  total.add(a);
  total.add(b);
  EXPECT_EQ(total.records_in, 20u);
  EXPECT_EQ(total.rows, 5u);
  EXPECT_EQ(total.checksum, 0xfedcba9876543210ULL + 0x0123456789abcdf0ULL);
  EXPECT_EQ(total.late, (std::map<int64_t, uint64_t>{{-100, 4}, {2000, 3}, {3000, 7}}));
  EXPECT_EQ(total.late_total(), 14u);
  EXPECT_EQ(total.latency_ms, (std::vector<double>{0.5, 1.25, 4}));
  EXPECT_EQ(total.seconds, 1.5);
  EXPECT_EQ(total.cpu_seconds, 3);
  EXPECT_FALSE(total.failure.has_value());
}

}  // namespace
