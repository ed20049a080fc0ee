// CombinerSpec<Bytes>: a combiner flow whose record layout is known only at
// run time (the Python package's numpy dtypes). It is the same flow as the
// typed spec of the same layout (participants agree at declare), refuses
// fields that cannot be read, and records pushed as bytes end in the same
// groups as the same records pushed typed (over a LocalFlow: the real shm
// rings without a registry).
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/combiner.h"
#include "sluice/worker.h"
#include "support/local_flow.h"
#include "support/test_support.h"

namespace sluice {
namespace {

struct Sale {
  uint64_t region;
  int32_t qty;
  float discount;
  double price;
};

constexpr uint32_t kQty = offsetof(Sale, qty), kDiscount = offsetof(Sale, discount),
                   kPrice = offsetof(Sale, price);

CombinerSpec<Sale> typed(const std::string& name) {
  return combiner<Sale>(name)
      .sources(testing::slots(2))
      .targets(testing::slots(2))
      .group_by(&Sale::region)
      .sum(&Sale::qty)
      .min(&Sale::discount)
      .max(&Sale::price)
      .avg(&Sale::price)
      .local_groups(8);
}

CombinerSpec<Bytes> untyped(const std::string& name) {
  return combiner(name, sizeof(Sale))
      .sources(testing::slots(2))
      .targets(testing::slots(2))
      .group_by(0, ValueKind::kUnsigned, 8)
      .sum(kQty, ValueKind::kSigned, 4)
      .min(kDiscount, ValueKind::kFloat, 4)
      .max(kPrice, ValueKind::kFloat, 8)
      .avg(kPrice, ValueKind::kFloat, 8)
      .local_groups(8);
}

TEST(CombinerBytesTest, IsTheSameFlowAsTheTypedSpecOfTheSameLayout) {
  EXPECT_EQ(untyped("sales").describe(), typed("sales").describe());
  EXPECT_EQ(untyped("sales").spec().canonical(), typed("sales").spec().canonical());
  EXPECT_EQ(untyped("sales").field(kPrice, ValueKind::kFloat, 8),
            typed("sales").field(&Sale::price));
  // Another aggregate, or the same offset read as another type: another flow.
  EXPECT_NE(untyped("sales").min(kQty, ValueKind::kSigned, 4).spec().canonical(),
            typed("sales").spec().canonical());
  EXPECT_NE(combiner("sales", sizeof(Sale))
                .sources(testing::slots(2))
                .targets(testing::slots(2))
                .group_by(0, ValueKind::kSigned, 8)
                .count()
                .spec()
                .canonical(),
            combiner<Sale>("sales")
                .sources(testing::slots(2))
                .targets(testing::slots(2))
                .group_by(&Sale::region)
                .count()
                .spec()
                .canonical());
}

TEST(CombinerBytesTest, RefusesFieldsThatCannotBeReadNamingThem) {
  auto expect_invalid = [](auto&& build, const std::string& needle) {
    try {
      build();
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid([] { combiner("c", 24).group_by(0, ValueKind::kFloat, 8); },
                 "the group key must be an integer field");
  expect_invalid([] { combiner("c", 24).sum(20, ValueKind::kSigned, 8); },
                 "sum(offset 20): a field of 8 bytes there does not lie inside the 24-byte record");
  expect_invalid([] { combiner("c", 24).max(0, ValueKind::kFloat, 2); },
                 "no field type of 2 bytes held as floating point");
  expect_invalid([] { combiner("c", 24).avg(4, ValueKind::kUnsigned, 3); },
                 "no field type of 3 bytes held as an integer");
}

TEST(CombinerBytesTest, RecordsPushedAsBytesEndInTheGroupsOfTheTypedRun) {
  std::vector<std::vector<Sale>> inputs(2);
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t i = 0; i < 5000; ++i) {
      const uint64_t h = sluice::hash64(uint64_t{s} << 32 | i);
      inputs[s].push_back(Sale{h % 97, static_cast<int32_t>(h % 1000) - 500,
                               static_cast<float>(h % 77) / 8.0f,
                               static_cast<double>(h % 100003) / 16.0});
    }
  }
  const Deadline deadline = Clock::now() + std::chrono::seconds(30);
  auto run = [&](const auto& spec, auto push_all) {
    testing::LocalFlow flow(spec.spec());
    using T = typename std::decay_t<decltype(spec)>::Record;
    std::vector<CombinerResult> results(2);
    Worker w;
    for (uint32_t t = 0; t < 2; ++t) {
      w.add(detail::combiner_target_from_core<T>(detail::make_combiner_target(
                detail::CombinerSpecAccess::core(spec), flow.target_core(t))),
            [&results, t](CombinerResult r) { results[t] = std::move(r); });
    }
    for (uint32_t s = 0; s < 2; ++s) {
      auto src = detail::combiner_source_from_core<T>(detail::make_combiner_source(
          detail::CombinerSpecAccess::core(spec), flow.source_core(s)));
      push_all(src, inputs[s]);
      EXPECT_EQ(src.close(deadline), Status::kOk) << src.error();
    }
    EXPECT_EQ(w.run(deadline), Status::kEndOfFlow) << w.error(w.reported());
    return results;
  };
  // (ring_segments and local_groups large enough that one thread pushes
  // everything before the targets merge.)
  auto typed_spec = typed("sales").ring_segments(4096);
  auto bytes_spec = untyped("sales").ring_segments(4096);
  const std::vector<CombinerResult> want = run(typed_spec, [&](auto& src, const auto& recs) {
    for (const Sale& r : recs) ASSERT_EQ(src.push(r, deadline), Status::kOk) << src.error();
  });
  const std::vector<CombinerResult> got = run(bytes_spec, [&](auto& src, const auto& recs) {
    const auto* bytes = reinterpret_cast<const std::byte*>(recs.data());
    // Not whole records: refused, nothing taken, the error says why.
    ASSERT_EQ(src.push(std::span(bytes, sizeof(Sale) + 3), deadline), Status::kInvalid);
    EXPECT_EQ(src.last_pushed(), 0u);
    EXPECT_NE(src.error().find("is not whole records of 24 bytes"), std::string::npos)
        << src.error();
    ASSERT_EQ(src.push(std::span(bytes, recs.size() * sizeof(Sale)), deadline), Status::kOk)
        << src.error();
    EXPECT_EQ(src.last_pushed(), recs.size());
  });
  size_t groups = 0;
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_EQ(got[t].size(), want[t].size()) << "target " << t;
    groups += got[t].size();
    for (size_t i = 0; i < got[t].size(); ++i) {
      const Group& g = got[t].groups()[i];
      const Group& w = want[t].groups()[i];
      EXPECT_EQ(g.key, w.key);
      EXPECT_EQ(g.count, w.count);
      // The same fields, in the same order: sum(0) of qty, min(1) of the
      // discount, max(2) and avg(2) of the price.
      EXPECT_EQ(g.sum(0), w.sum(0)) << "group " << g.key;
      EXPECT_EQ(g.min(1), w.min(1)) << "group " << g.key;
      EXPECT_EQ(g.max(2), w.max(2)) << "group " << g.key;
      EXPECT_EQ(g.avg(2), w.avg(2)) << "group " << g.key;
    }
  }
  EXPECT_EQ(groups, 97u);
}

}  // namespace
}  // namespace sluice
