// Combiner flows inside one process: the spec builder, the group tables
// (fold, merge, refuse-when-full, grow), and sources and targets wired over
// a LocalFlow (the real shm ring code without a registry), checked against
// plain sequential reference aggregates for every value type and aggregate.
#include "sluice/combiner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "combiner/combiner_reference.h"
#include "combiner/group_table.h"
#include "combiner/layout.h"
#include "combiner/partial.h"
#include "sluice/worker.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

using combiner_test::check_count;
using combiner_test::check_field;
using combiner_test::RefField;
using combiner_test::SplitMix;

// Every value type a field may have, behind a signed key.
struct Rec {
  int32_t key;
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  float f32;
  double f64;
};

constexpr uint8_t kAll = detail::kAggSum | detail::kAggMin | detail::kAggMax | detail::kAggAvg;

template <class V>
CombinerSpec<Rec>& all_of(CombinerSpec<Rec>& spec, V Rec::*m) {
  return spec.sum(m).min(m).max(m).avg(m);
}

CombinerSpec<Rec> rec_spec(const char* name, uint32_t sources, uint32_t targets,
                           uint32_t local_groups) {
  CombinerSpec<Rec> spec = combiner<Rec>(name)
                               .sources(testing::slots(sources))
                               .targets(testing::slots(targets, 1))
                               .group_by(&Rec::key)
                               .count()
                               .local_groups(local_groups);
  all_of(spec, &Rec::i8);
  all_of(spec, &Rec::i16);
  all_of(spec, &Rec::i32);
  all_of(spec, &Rec::i64);
  all_of(spec, &Rec::u8);
  all_of(spec, &Rec::u16);
  all_of(spec, &Rec::u32);
  all_of(spec, &Rec::u64);
  all_of(spec, &Rec::f32);
  all_of(spec, &Rec::f64);
  return spec;
}

Rec random_rec(SplitMix& rng, uint32_t groups) {
  Rec r{};
  r.key =
      static_cast<int32_t>(rng() % groups) - static_cast<int32_t>(groups / 2);  // negative keys too
  r.i8 = static_cast<int8_t>(rng());
  r.i16 = static_cast<int16_t>(rng());
  r.i32 = static_cast<int32_t>(rng());
  r.i64 = static_cast<int64_t>(rng());  // sums overflow and wrap
  r.u8 = static_cast<uint8_t>(rng());
  r.u16 = static_cast<uint16_t>(rng());
  r.u32 = static_cast<uint32_t>(rng());
  r.u64 = rng();
  r.f32 = static_cast<float>(static_cast<int64_t>(rng() % 2000001) - 1000000) / 64.0f;
  r.f64 = static_cast<double>(static_cast<int64_t>(rng() >> 11) - (int64_t{1} << 52)) * 1e-9;
  return r;
}

struct RefGroup {
  RefField<int8_t> i8;
  RefField<int16_t> i16;
  RefField<int32_t> i32;
  RefField<int64_t> i64;
  RefField<uint8_t> u8;
  RefField<uint16_t> u16;
  RefField<uint32_t> u32;
  RefField<uint64_t> u64;
  RefField<float> f32;
  RefField<double> f64;
  void add(const Rec& r) {
    i8.add(r.i8), i16.add(r.i16), i32.add(r.i32), i64.add(r.i64), u8.add(r.u8);
    u16.add(r.u16), u32.add(r.u32), u64.add(r.u64), f32.add(r.f32), f64.add(r.f64);
  }
};

using Reference = std::map<uint64_t, RefGroup>;

Reference reference_of(const std::vector<std::vector<Rec>>& inputs) {
  Reference ref;
  for (const auto& source : inputs)
    for (const Rec& r : source) ref[static_cast<uint64_t>(int64_t{r.key})].add(r);
  return ref;
}

// Compares one group with the reference; returns the differences.
std::string diff(const Group& g, const RefGroup& ref) {
  std::string why;
  check_count(g, ref.i8.count, &why);
  check_field(g, &Rec::i8, "i8", kAll, ref.i8, &why);
  check_field(g, &Rec::i16, "i16", kAll, ref.i16, &why);
  check_field(g, &Rec::i32, "i32", kAll, ref.i32, &why);
  check_field(g, &Rec::i64, "i64", kAll, ref.i64, &why);
  check_field(g, &Rec::u8, "u8", kAll, ref.u8, &why);
  check_field(g, &Rec::u16, "u16", kAll, ref.u16, &why);
  check_field(g, &Rec::u32, "u32", kAll, ref.u32, &why);
  check_field(g, &Rec::u64, "u64", kAll, ref.u64, &why);
  check_field(g, &Rec::f32, "f32", kAll, ref.f32, &why);
  check_field(g, &Rec::f64, "f64", kAll, ref.f64, &why);
  return why;
}

// The ends of a combiner over a LocalFlow of its partials.
template <class T>
Source<Combined<T>> local_source(const CombinerSpec<T>& spec, testing::LocalFlow& flow,
                                 uint32_t s) {
  return detail::combiner_source_from_core<T>(
      detail::make_combiner_source(detail::CombinerSpecAccess::core(spec), flow.source_core(s)));
}
template <class T>
Target<Combined<T>> local_target(const CombinerSpec<T>& spec, testing::LocalFlow& flow,
                                 uint32_t t) {
  return detail::combiner_target_from_core<T>(
      detail::make_combiner_target(detail::CombinerSpecAccess::core(spec), flow.target_core(t)));
}

// What running a combiner over a LocalFlow produced.
template <class T>
struct Run {
  std::vector<CombinerResult> results;  // per target
  uint64_t table_flushes = 0;
  uint64_t partials = 0;
  uint64_t backpressured = 0;
};

// Pushes inputs[s] through source s, one record per source in turn, on this
// one thread, and has a Worker merge every target's partials: whenever a ring
// is full, pushing through the Worker drains the targets, so rings of any
// size drain. Then closes every source and runs the Worker to the end.
template <class T>
Run<T> run_local(const CombinerSpec<T>& spec, const std::vector<std::vector<T>>& inputs) {
  testing::LocalFlow flow(spec.spec());
  const size_t ntargets = spec.spec().targets().size();
  const Deadline deadline = Clock::now() + std::chrono::seconds(10);
  std::vector<Source<Combined<T>>> sources;
  for (uint32_t s = 0; s < inputs.size(); ++s) sources.push_back(local_source(spec, flow, s));
  Run<T> run;
  run.results.resize(ntargets);
  std::vector<int> handed(ntargets, 0);
  Worker w;
  for (uint32_t t = 0; t < ntargets; ++t) {
    w.add(local_target(spec, flow, t), [&run, &handed, t](CombinerResult r) {
      run.results[t] = std::move(r);
      ++handed[t];
    });
  }
  size_t longest = 0;
  for (const auto& in : inputs) longest = std::max(longest, in.size());
  for (size_t i = 0; i < longest; ++i) {
    for (size_t s = 0; s < inputs.size(); ++s) {
      if (i >= inputs[s].size()) continue;
      Status st = sources[s].try_push(inputs[s][i]);
      if (st == Status::kWouldBlock) {
        ++run.backpressured;
        st = w.push(sources[s], inputs[s][i], deadline);
      }
      EXPECT_EQ(st, Status::kOk) << sources[s].error();
    }
  }
  for (auto& s : sources) {
    EXPECT_EQ(w.close(s, deadline), Status::kOk) << s.error();
    run.table_flushes += s.table_flushes();
    run.partials += s.partials_sent();
  }
  EXPECT_EQ(w.run(deadline), Status::kEndOfFlow) << w.error(w.reported());
  uint64_t merged = 0;
  for (uint32_t t = 0; t < ntargets; ++t) {
    EXPECT_EQ(handed[t], 1) << "target " << t << "'s handler runs once, at end of flow";
    merged += run.results[t].partials();
  }
  EXPECT_EQ(merged, run.partials);
  return run;
}

std::vector<std::vector<Rec>> random_inputs(uint32_t sources, uint32_t records, uint32_t groups,
                                            uint64_t seed) {
  std::vector<std::vector<Rec>> inputs(sources);
  for (uint32_t s = 0; s < sources; ++s) {
    SplitMix rng(seed + s);
    for (uint32_t i = 0; i < records; ++i) inputs[s].push_back(random_rec(rng, groups));
  }
  return inputs;
}

// Every group on the target target_of() names, every reference group
// somewhere, each equal to the reference.
template <class T>
void expect_matches(const CombinerSpec<T>& spec, const Run<T>& run, const Reference& ref) {
  size_t found = 0;
  for (uint32_t t = 0; t < run.results.size(); ++t) {
    for (const Group& g : run.results[t].groups()) {
      ++found;
      EXPECT_EQ(spec.target_of(g.key), t) << "group " << g.key;
      auto it = ref.find(g.key);
      ASSERT_NE(it, ref.end()) << "group " << g.key << " is not in the input";
      EXPECT_EQ(diff(g, it->second), "");
    }
  }
  EXPECT_EQ(found, ref.size());
}

TEST(CombinerSpecTest, FieldsAreNumberedInOrderOfFirstDeclaration) {
  struct Sale {
    uint64_t region;
    int64_t qty;
    double price;
  };
  auto spec = combiner<Sale>("sales")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .group_by(&Sale::region)
                  .sum(&Sale::qty)
                  .min(&Sale::price)
                  .max(&Sale::price)
                  .avg(&Sale::price)
                  .avg(&Sale::qty)
                  .count();
  EXPECT_EQ(spec.field(&Sale::qty), 0u);
  EXPECT_EQ(spec.field(&Sale::price), 1u);
  // qty: one SUM slot (AVG shares it); price: SUM (for AVG), MIN, MAX.
  EXPECT_EQ(detail::CombinerSpecAccess::core(spec).layout()->slots, 4u);
  EXPECT_EQ(detail::CombinerSpecAccess::core(spec).layout()->partial_bytes(), 20u + 4 * 8);
  EXPECT_EQ(spec.describe(), "key u64@0; count; f0 i64@8 sum avg; f1 f64@16 min max avg");
  EXPECT_NO_THROW(spec.validate());
  const FlowSpec flow = spec.spec();
  EXPECT_EQ(flow.record_size(), 0u);  // partials are byte records
  EXPECT_EQ(flow.key_offset(), detail::kPartialKeyOffset);
  EXPECT_EQ(flow.key_size(), 8u);
  EXPECT_NE(flow.type_name().find(spec.describe()), std::string::npos) << flow.type_name();
}

TEST(CombinerSpecTest, DeclareSeesTheLayoutSoParticipantsThatAggregateDifferentlyDisagree) {
  struct R {
    uint64_t k;
    int64_t v;
  };
  auto base = [] {
    return combiner<R>("agree")
        .sources(testing::slots(2))
        .targets(testing::slots(1))
        .group_by(&R::k);
  };
  // Cluster::declare compares FlowSpec::canonical() between participants.
  const std::string sum = base().sum(&R::v).spec().canonical();
  EXPECT_EQ(sum, base().sum(&R::v).spec().canonical());
  EXPECT_NE(sum, base().min(&R::v).spec().canonical());
  EXPECT_NE(sum, base().sum(&R::v).count().spec().canonical());
  EXPECT_NE(sum.find("f0 i64@8 sum"), std::string::npos) << sum;
  // A copy keeps its layout when the original changes.
  auto a = base().sum(&R::v);
  auto b = a;
  a.max(&R::v);
  EXPECT_EQ(b.describe(), "key u64@0; f0 i64@8 sum");
  EXPECT_EQ(a.describe(), "key u64@0; f0 i64@8 sum max");
}

TEST(CombinerSpecTest, RejectsWhatCannotWorkNamingTheFix) {
  struct R {
    uint64_t k;
    int64_t v;
  };
  auto expect_invalid = [](const auto& spec, const std::string& needle) {
    try {
      spec.validate();
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto base = [] { return combiner<R>("c").sources(testing::slots(1)).targets(testing::slots(1)); };
  expect_invalid(base().sum(&R::v), ".group_by(&T::field)");
  expect_invalid(base().group_by(&R::k), ".count()");
  expect_invalid(base().group_by(&R::k).count().local_groups(0), "local_groups");
  expect_invalid(base().group_by(&R::k).count().segment_bytes(16), "raise segment_bytes");
  expect_invalid(combiner<R>("c").targets(testing::slots(1)).group_by(&R::k).count(), "sources");
}

TEST(GroupTableTest, BoundedTableRefusesOnlyNewGroupsWhenFull) {
  struct R {
    uint64_t k;
    int64_t v;
  };
  auto spec = combiner<R>("t").group_by(&R::k).sum(&R::v);
  auto layout = detail::CombinerSpecAccess::core(spec).layout();
  auto table = detail::GroupTable::bounded(layout, 3);
  auto add = [&](uint64_t k, int64_t v) {
    R r{k, v};
    return table.add(reinterpret_cast<const std::byte*>(&r));
  };
  EXPECT_TRUE(add(10, 1));
  EXPECT_TRUE(add(20, 2));
  EXPECT_TRUE(add(30, 3));
  EXPECT_FALSE(add(40, 4));  // a fourth group does not fit
  EXPECT_TRUE(add(20, 5));   // a known one still folds in
  EXPECT_EQ(table.size(), 3u);
  std::map<uint64_t, std::pair<uint64_t, int64_t>> seen;
  for (size_t i = 0; i < table.capacity(); ++i) {
    if (const uint64_t* e = table.entry(i)) seen[e[0]] = {e[1], static_cast<int64_t>(e[2])};
  }
  using P = std::pair<uint64_t, int64_t>;
  EXPECT_EQ(seen, (std::map<uint64_t, P>{{10, P{1, 1}}, {20, P{2, 7}}, {30, P{1, 3}}}));
  table.clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_TRUE(add(40, 4));
}

TEST(GroupTableTest, GrowingTableKeepsEveryGroupAcrossRehashes) {
  struct R {
    uint64_t k;
    uint32_t v;
  };
  auto spec = combiner<R>("t").group_by(&R::k).sum(&R::v).max(&R::v);
  auto table = detail::GroupTable::growing(detail::CombinerSpecAccess::core(spec).layout(), 4);
  const size_t before = table.capacity();
  for (uint64_t i = 0; i < 3 * 10000; ++i) {
    R r{(i * 7919) % 10000, static_cast<uint32_t>(i)};
    ASSERT_TRUE(table.add(reinterpret_cast<const std::byte*>(&r)));
  }
  EXPECT_EQ(table.size(), 10000u);
  EXPECT_GT(table.capacity(), before);
  size_t groups = 0;
  for (size_t i = 0; i < table.capacity(); ++i) {
    const uint64_t* e = table.entry(i);
    if (e == nullptr) continue;
    ++groups;
    // Key k is hit by i0, i0 + 10000 and i0 + 20000 for one i0 < 10000, so
    // its sum is 3 * i0 + 30000 and its max i0 + 20000.
    EXPECT_EQ(e[1], 3u);
    EXPECT_EQ(e[2], 3 * e[3] - 30000) << "key " << e[0];
  }
  EXPECT_EQ(groups, 10000u);
}

TEST(GroupTableTest, MergingPartialsOfChunksEqualsFoldingAllRecords) {
  auto spec = rec_spec("t", 1, 1, 1);
  auto layout = detail::CombinerSpecAccess::core(spec).layout();
  auto inputs = random_inputs(1, 5000, 50, 7);
  auto whole = detail::GroupTable::growing(layout, 16);
  auto merged = detail::GroupTable::growing(layout, 16);
  for (size_t start = 0; start < inputs[0].size(); start += 97) {
    auto chunk = detail::GroupTable::bounded(layout, 1000);
    for (size_t i = start; i < std::min(start + 97, inputs[0].size()); ++i) {
      const auto* p = reinterpret_cast<const std::byte*>(&inputs[0][i]);
      ASSERT_TRUE(chunk.add(p));
      ASSERT_TRUE(whole.add(p));
    }
    for (size_t i = 0; i < chunk.capacity(); ++i) {
      if (const uint64_t* e = chunk.entry(i))
        merged.merge(e[0], e[1], reinterpret_cast<const std::byte*>(e + 2));
    }
  }
  auto a = detail::result_from_table(whole, 0);
  auto b = detail::result_from_table(merged, 0);
  ASSERT_EQ(a.size(), b.size());
  const Reference ref = reference_of(inputs);
  for (size_t i = 0; i < a.size(); ++i) {
    const Group& x = a.groups()[i];
    const Group& y = b.groups()[i];
    ASSERT_EQ(x.key, y.key);
    EXPECT_EQ(x.count, y.count);
    // Integers and every MIN/MAX are bit-identical; float sums differ by order only.
    for (size_t f = 0; f < 8; ++f) {
      EXPECT_EQ(x.sum(f), y.sum(f)) << "field " << f;
      EXPECT_EQ(x.min(f), y.min(f)) << "field " << f;
      EXPECT_EQ(x.max(f), y.max(f)) << "field " << f;
    }
    for (size_t f = 8; f < 10; ++f) {
      EXPECT_EQ(x.min(f), y.min(f)) << "field " << f;
      EXPECT_EQ(x.max(f), y.max(f)) << "field " << f;
    }
    EXPECT_EQ(diff(x, ref.at(x.key)), "");
    EXPECT_EQ(diff(y, ref.at(y.key)), "");
  }
}

TEST(CombinerFlowTest, EveryAggregateOfEveryValueTypeMatchesTheReferenceWithATinyLocalTable) {
  auto spec = rec_spec("every-type", 3, 2, 4);
  auto inputs = random_inputs(3, 4000, 200, 1);
  auto run = run_local(spec, inputs);
  EXPECT_GT(run.table_flushes, 100u) << "a 4-group table over 200 groups must fill often";
  expect_matches(spec, run, reference_of(inputs));
}

TEST(CombinerFlowTest, LargeLocalTableSendsOnePartialPerGroupOnClose) {
  auto spec = rec_spec("large-table", 2, 3, 1 << 12);
  auto inputs = random_inputs(2, 3000, 100, 2);
  auto run = run_local(spec, inputs);
  EXPECT_EQ(run.table_flushes, 0u);
  size_t groups_per_source = 0;
  for (const auto& in : inputs) groups_per_source += reference_of({in}).size();
  EXPECT_EQ(run.partials, groups_per_source);
  expect_matches(spec, run, reference_of(inputs));
}

TEST(CombinerFlowTest, GroupsOnOneSourceOnlyArriveWhole) {
  // Source s sends keys s*1000+100 .. s*1000+109 only, and a shared key 7.
  auto spec = rec_spec("private-groups", 4, 3, 2);
  std::vector<std::vector<Rec>> inputs(4);
  SplitMix rng(3);
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 500; ++i) {
      Rec r = random_rec(rng, 10);
      r.key = (i % 3 == 0) ? 7 : s * 1000 + 100 + i % 10;
      inputs[s].push_back(r);
    }
  }
  auto run = run_local(spec, inputs);
  const Reference ref = reference_of(inputs);
  EXPECT_EQ(ref.size(), 41u);
  expect_matches(spec, run, ref);
}

TEST(CombinerFlowTest, IntegerSumsWrapModulo2To64WhateverTheOrder) {
  struct R {
    uint64_t k;
    int64_t s;
    uint64_t u;
  };
  auto spec = combiner<R>("wrap")
                  .sources(testing::slots(2))
                  .targets(testing::slots(1))
                  .group_by(&R::k)
                  .sum(&R::s)
                  .sum(&R::u)
                  .local_groups(1);
  const int64_t big = std::numeric_limits<int64_t>::max();
  // True sums: 3*big - 5 (overflows int64) and 3 * 2^63 (overflows uint64).
  std::vector<std::vector<R>> inputs = {
      {{1, big, uint64_t{1} << 63}, {2, 0, 0}, {1, big, uint64_t{1} << 63}},
      {{1, -5, 0}, {2, 0, 0}, {1, big, uint64_t{1} << 63}}};
  auto run = run_local(spec, inputs);
  const Group* g = run.results[0].find(1);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->count, 4u);
  EXPECT_EQ(static_cast<uint64_t>(g->sum(&R::s)), 3 * static_cast<uint64_t>(big) - 5);
  EXPECT_EQ(g->sum(&R::u), uint64_t{1} << 63);  // 3 * 2^63 mod 2^64
  EXPECT_EQ(g->sum(0).kind(), ValueKind::kSigned);
  EXPECT_EQ(g->sum(1).kind(), ValueKind::kUnsigned);
}

TEST(CombinerFlowTest, FloatMinAndMaxIgnoreNaNAndOrderSignedZerosWhateverTheOrder) {
  struct R {
    uint64_t k;
    double d;
    float f;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<R> values = {{1, 0.0, 0.0f}, {1, nan, -0.0f}, {1, -0.0, NAN}, {1, 2.5, 1.0f},
                           {2, nan, NAN},  {2, nan, NAN},   {3, 0.0, 0.0f}, {3, 0.0, 0.0f}};
  std::vector<std::string> seen;
  for (int order = 0; order < 6; ++order) {
    auto spec = combiner<R>("nan-" + std::to_string(order))
                    .sources(testing::slots(2))
                    .targets(testing::slots(1))
                    .group_by(&R::k)
                    .min(&R::d)
                    .max(&R::d)
                    .min(&R::f)
                    .max(&R::f)
                    .sum(&R::d)
                    .local_groups(1);
    std::vector<R> shuffled = values;
    std::mt19937 rng(order);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    std::vector<std::vector<R>> inputs(2);
    for (size_t i = 0; i < shuffled.size(); ++i) inputs[i % 2].push_back(shuffled[i]);
    auto run = run_local(spec, inputs);
    const auto& res = run.results[0];
    ASSERT_EQ(res.size(), 3u);
    const Group& g1 = *res.find(1);
    EXPECT_EQ(std::bit_cast<uint64_t>(g1.min(&R::d)), std::bit_cast<uint64_t>(-0.0));
    EXPECT_EQ(g1.max(&R::d), 2.5);
    EXPECT_TRUE(std::signbit(g1.min(&R::f)));
    EXPECT_EQ(g1.max(&R::f), 1.0f);
    EXPECT_TRUE(std::isnan(g1.sum(&R::d)));
    const Group& g2 = *res.find(2);  // every value NaN: so are MIN and MAX
    EXPECT_TRUE(std::isnan(g2.min(&R::d)));
    EXPECT_TRUE(std::isnan(g2.max(&R::f)));
    const Group& g3 = *res.find(3);
    EXPECT_FALSE(std::signbit(g3.min(&R::d)));
    EXPECT_FALSE(std::signbit(g3.sum(&R::d)));
    // Bit-identical results whatever the order.
    std::string bits;
    for (const Group& g : res.groups())
      for (size_t f = 0; f < 2; ++f)
        bits += std::to_string(g.min(f).bits()) + "/" + std::to_string(g.max(f).bits()) + " ";
    seen.push_back(bits);
  }
  for (const auto& s : seen) EXPECT_EQ(s, seen[0]);
}

TEST(CombinerFlowTest, SignedAndEnumKeysRoundTripThroughUint64) {
  enum class Color : int16_t { kRed = -3, kBlue = 7 };
  struct R {
    Color c;
    int8_t k;
    uint16_t v;
  };
  auto by_color = combiner<R>("color")
                      .sources(testing::slots(1))
                      .targets(testing::slots(2))
                      .group_by(&R::c)
                      .count();
  auto by_k = combiner<R>("k")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .group_by(&R::k)
                  .sum(&R::v);
  std::vector<std::vector<R>> inputs = {
      {{Color::kRed, -1, 1}, {Color::kBlue, -1, 2}, {Color::kRed, 100, 3}}};
  auto colors = run_local(by_color, inputs);
  auto ks = run_local(by_k, inputs);
  std::map<int64_t, uint64_t> counts, sums;
  for (const auto& r : colors.results)
    for (const Group& g : r.groups()) counts[static_cast<int16_t>(g.key)] = g.count;
  for (const auto& r : ks.results)
    for (const Group& g : r.groups()) sums[static_cast<int8_t>(g.key)] = g.sum(&R::v);
  EXPECT_EQ(counts, (std::map<int64_t, uint64_t>{{-3, 2}, {7, 1}}));
  EXPECT_EQ(sums, (std::map<int64_t, uint64_t>{{-1, 3}, {100, 3}}));
  EXPECT_EQ(colors.results[by_color.target_of(static_cast<uint64_t>(int64_t{-3}))]
                .find(static_cast<uint64_t>(int64_t{-3}))
                ->count,
            2u);
}

TEST(CombinerFlowTest, CountOnlyCombinerCountsRecordsPerGroup) {
  struct R {
    uint32_t k;
  };
  auto spec = combiner<R>("count")
                  .sources(testing::slots(2))
                  .targets(testing::slots(1))
                  .group_by(&R::k)
                  .count()
                  .local_groups(2);
  std::vector<std::vector<R>> inputs(2);
  for (uint32_t i = 0; i < 1000; ++i) inputs[i % 2].push_back({i % 10});
  auto run = run_local(spec, inputs);
  ASSERT_EQ(run.results[0].size(), 10u);
  for (const Group& g : run.results[0].groups()) EXPECT_EQ(g.count, 100u) << g.key;
}

TEST(CombinerFlowTest, TryPushReportsBackPressureAndTakesTheRecordWhenRetried) {
  // Two 512-byte segments per ring (one 264-byte partial each) and one group
  // per table: a ring fills after two partials.
  auto spec = rec_spec("tight", 2, 1, 1).segment_bytes(512).ring_segments(2);
  auto inputs = random_inputs(2, 3000, 1000, 4);
  auto run = run_local(spec, inputs);
  EXPECT_GT(run.backpressured, 0u);
  expect_matches(spec, run, reference_of(inputs));
}

// One source and one target counting records by key.
struct Key {
  uint64_t k;
};
CombinerSpec<Key> count_spec(const char* name) {
  return combiner<Key>(name)
      .sources(testing::slots(1))
      .targets(testing::slots(1))
      .group_by(&Key::k)
      .count();
}

TEST(CombinerFlowTest, PushAfterCloseReturnsClosed) {
  auto spec = count_spec("closed");
  testing::LocalFlow flow(spec.spec());
  auto src = local_source(spec, flow, 0);
  EXPECT_EQ(src.push({1}), Status::kOk);
  EXPECT_EQ(src.close(), Status::kOk);
  EXPECT_EQ(src.push({1}), Status::kClosed);
  EXPECT_NE(src.error().find("after close"), std::string::npos) << src.error();
  EXPECT_EQ(src.close(), Status::kOk);  // idempotent
  auto dst = local_target(spec, flow, 0);
  ASSERT_EQ(dst.collect(Clock::now() + std::chrono::seconds(5)), Status::kOk) << dst.error();
  EXPECT_TRUE(dst.done());
  EXPECT_EQ(dst.collect(Clock::now()), Status::kOk);  // and stays done
  ASSERT_EQ(dst.result().size(), 1u);
  EXPECT_EQ(dst.result().groups()[0].count, 1u);
}

// A combiner flow's ends are Source<Combined<T>> and Target<Combined<T>>,
// and the target consumes as every target does: the final groups once,
// when every source has closed (kTimeout before: call again), then
// kEndOfFlow. The 1.0 names are the same types.
TEST(CombinerFlowTest, ATargetConsumesTheFinalGroupsOnceThenEndOfFlow) {
  auto spec = count_spec("consume");
  testing::LocalFlow flow(spec.spec());
  Source<Combined<Key>> src = local_source(spec, flow, 0);
  Target<Combined<Key>> dst = local_target(spec, flow, 0);
  ASSERT_EQ(src.push({7}), Status::kOk);
  ASSERT_EQ(src.push({7}), Status::kOk);
  ASSERT_EQ(src.push({8}), Status::kOk);
  EXPECT_EQ(dst.consume(Clock::now()).status(), Status::kTimeout) << "the source is open";
  ASSERT_EQ(src.close(), Status::kOk);
  Result<CombinerResult> groups = dst.consume(Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(groups) << dst.error();
  ASSERT_EQ(groups->size(), 2u);
  const Group* seven = groups->find(7);
  ASSERT_NE(seven, nullptr);
  EXPECT_EQ(seven->count, 2u);
  EXPECT_EQ(dst.consume(Clock::now()).status(), Status::kEndOfFlow);
  EXPECT_EQ(dst.consume(Clock::now()).status(), Status::kEndOfFlow);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  static_assert(std::is_same_v<CombinerSource<Key>, Source<Combined<Key>>>);
  static_assert(std::is_same_v<CombinerTarget<Key>, Target<Combined<Key>>>);
#pragma GCC diagnostic pop
}

// A combiner source has close_and_wait() (over shm its partials are
// delivered once published, so it returns at once; over ofi it waits for its
// targets' confirmations), and its error() says nothing once a later call
// succeeded, as every source's does.
TEST(CombinerFlowTest, CloseAndWaitDeliversAndErrorClearsOnSuccess) {
  // abort() on an empty handle does nothing, as on every source.
  decltype(local_source(count_spec("empty"), std::declval<testing::LocalFlow&>(), 0)) empty;
  empty.abort();
  EXPECT_FALSE(empty);
  auto spec = count_spec("close-wait");
  testing::LocalFlow flow(spec.spec());
  auto src = local_source(spec, flow, 0);
  EXPECT_EQ(src.push({1}), Status::kOk);
  EXPECT_EQ(src.push({2}), Status::kOk);
  EXPECT_EQ(src.close_and_wait(Clock::now() + std::chrono::seconds(5)), Status::kOk) << src.error();
  EXPECT_EQ(src.push({3}), Status::kClosed);
  EXPECT_NE(src.error().find("after close"), std::string::npos) << src.error();
  EXPECT_EQ(src.close_and_wait(Clock::now() + std::chrono::seconds(5)), Status::kOk);
  EXPECT_TRUE(src.error().empty()) << src.error();
  auto dst = local_target(spec, flow, 0);
  ASSERT_EQ(dst.collect(Clock::now() + std::chrono::seconds(5)), Status::kOk) << dst.error();
  ASSERT_EQ(dst.result().size(), 2u);
}

// One key and one value, for specs of one flow that aggregate it differently.
struct KV {
  uint64_t k;
  int64_t v;
};
CombinerSpec<KV> kv_spec(const char* name) {
  return combiner<KV>(name).sources(testing::slots(1)).targets(testing::slots(1)).group_by(&KV::k);
}

TEST(CombinerFlowTest, TargetRejectsPartialsOfAnotherLayoutNamingTheFix) {
  auto sender = kv_spec("mismatch").sum(&KV::v);
  auto receiver = kv_spec("mismatch").min(&KV::v);
  testing::LocalFlow flow(sender.spec());
  auto src = local_source(sender, flow, 0);
  EXPECT_EQ(src.push({1, 2}), Status::kOk);
  EXPECT_EQ(src.close(), Status::kOk);
  auto dst = local_target(receiver, flow, 0);
  EXPECT_EQ(dst.collect(Clock::now() + std::chrono::seconds(5)), Status::kInvalid);
  EXPECT_FALSE(dst.done());
  EXPECT_NE(dst.error().find("must declare the same group_by"), std::string::npos) << dst.error();
  EXPECT_NE(dst.error().find("f0 i64@8 min"), std::string::npos) << dst.error();
  EXPECT_EQ(dst.collect(Clock::now()), Status::kInvalid);  // and stays failed
}

TEST(CombinerFlowTest, WorkerReportsATargetThatGetsPartialsOfAnotherLayoutWithoutAResult) {
  auto sender = kv_spec("worker-mismatch").sum(&KV::v);
  auto receiver = kv_spec("worker-mismatch").max(&KV::v);
  testing::LocalFlow flow(sender.spec());
  auto src = local_source(sender, flow, 0);
  bool handed = false;
  Worker w;
  const Worker::InputId id =
      w.add(local_target(receiver, flow, 0), [&](CombinerResult) { handed = true; });
  EXPECT_EQ(w.push(src, KV{1, 2}), Status::kOk);
  EXPECT_EQ(w.close(src), Status::kOk);
  EXPECT_EQ(w.run(Clock::now() + std::chrono::seconds(5)), Status::kInvalid);
  EXPECT_EQ(w.reported(), id);
  EXPECT_EQ(w.status(id), Status::kInvalid);
  EXPECT_NE(w.error(id).find("f0 i64@8 max"), std::string::npos) << w.error(id);
  EXPECT_FALSE(handed);
  EXPECT_TRUE(w.done());
}

TEST(GroupTest, AskingForAnUndeclaredAggregateThrowsNamingTheFix) {
  struct R {
    uint64_t k;
    int64_t v;
    double d;
  };
  auto spec = combiner<R>("undeclared")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .group_by(&R::k)
                  .sum(&R::v);
  auto run = run_local(spec, std::vector<std::vector<R>>{{{1, 5, 0.5}}});
  const Group& g = run.results[0].groups()[0];
  EXPECT_EQ(g.sum(&R::v), 5);
  EXPECT_EQ(g.avg(&R::v), 5.0);  // AVG needs only the SUM
  try {
    (void)g.min(0);
    ADD_FAILURE() << "min of a field declared with sum() only";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".min(&T::field)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)g.max(&R::d), Error);  // never declared at all
  EXPECT_THROW((void)g.sum(3), Error);
}

TEST(ZipfTest, RankProbabilitiesFollowThePowerLaw) {
  combiner_test::Zipf zipf(1000, 1.1);
  EXPECT_NEAR(zipf.p(0) / zipf.p(1), std::pow(2.0, 1.1), 1e-9);
  SplitMix rng(5);
  std::vector<uint64_t> hits(1000, 0);
  for (int i = 0; i < 200000; ++i) ++hits[zipf(rng())];
  EXPECT_NEAR(hits[0] / 200000.0, zipf.p(0), 0.01);
  EXPECT_GT(hits[0], 10 * hits[99]);
}

}  // namespace
}  // namespace sluice
