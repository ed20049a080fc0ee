// Source<T>::push(span) and try_push(span): a run of records has exactly
// the results of as many single pushes (routing, per-target order, counts),
// and when it stops early it says how much of the run went, so that nothing
// is pushed twice or skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "sluice/flow.h"
#include "sluice/worker.h"
#include "support/key_value.h"
#include "support/local_flow.h"

namespace sluice {
namespace {

using Rec = testing::KeyValue;

std::vector<Rec> records(uint64_t n, uint64_t first = 0) {
  std::vector<Rec> v;
  for (uint64_t i = first; i < first + n; ++i) v.push_back(Rec{i * 0x9e3779b97f4a7c15ULL, i});
  return v;
}

// 4 records per segment, 4 segments per ring: runs cross many segments.
ShuffleSpec<Rec> keyed(uint32_t targets) {
  return shuffle<Rec>("runs")
      .sources(testing::slots(1))
      .targets(testing::slots(targets))
      .key(&Rec::key)
      .segment_bytes(64)
      .ring_segments(4);
}

// Everything target `t` consumes, in order.
std::vector<uint64_t> drain(Target<Rec>& in) {
  std::vector<uint64_t> got;
  while (auto batch = in.try_consume())
    for (const Rec& r : *batch) got.push_back(r.value);
  return got;
}

TEST(PushRunTest, OneTargetTakesTheRunInOrderThroughAFullRing) {
  auto spec = keyed(1);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  Worker w;
  std::vector<uint64_t> got;
  w.add(flow.target<Rec>(0), [&](std::span<const Rec> batch) {
    for (const Rec& r : batch) got.push_back(r.value);
  });
  // 1000 records through a ring of 16: the worker consumes while it waits.
  const std::vector<Rec> run = records(1000);
  ASSERT_EQ(w.push(out, run), Status::kOk);
  EXPECT_EQ(out.last_pushed(), run.size());
  ASSERT_EQ(w.close(out), Status::kOk);
  ASSERT_EQ(w.run(), Status::kEndOfFlow);
  ASSERT_EQ(got.size(), run.size());
  for (uint64_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i);
}

TEST(PushRunTest, SeveralTargetsGetWhatSinglePushesWouldSendThemInTheSameOrder) {
  auto spec = keyed(3);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  std::vector<Target<Rec>> ins;
  for (uint32_t t = 0; t < 3; ++t) ins.push_back(flow.target<Rec>(t));
  // Runs of every length up to 20 (shorter than, as long as and longer than
  // a segment), each consumed before the next so no ring fills.
  std::vector<std::vector<uint64_t>> want(3), got(3);
  uint64_t next = 0;
  for (uint64_t len = 1; len <= 20; ++len) {
    const std::vector<Rec> run = records(len, next);
    next += len;
    for (const Rec& r : run) want[out.target_of(r)].push_back(r.value);
    ASSERT_EQ(out.push(std::span<const Rec>(run)), Status::kOk);
    EXPECT_EQ(out.last_pushed(), len);
    ASSERT_EQ(out.flush(), Status::kOk);
    for (uint32_t t = 0; t < 3; ++t) {
      std::vector<uint64_t> part = drain(ins[t]);
      got[t].insert(got[t].end(), part.begin(), part.end());
    }
  }
  uint64_t total = 0;
  for (uint32_t t = 0; t < 3; ++t) {
    EXPECT_EQ(got[t], want[t]) << "target " << t;
    EXPECT_FALSE(want[t].empty()) << "the keys should reach every target";
    total += got[t].size();
  }
  EXPECT_EQ(total, next);
}

TEST(PushRunTest, TryPushTakesTheLongestPrefixThatFitsAndTheRestFollowsOnce) {
  auto spec = keyed(1);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  const std::vector<Rec> run = records(100);
  std::span<const Rec> rest(run);
  // The ring holds 4 segments of 4 records: 16 go, then it is full.
  ASSERT_EQ(out.try_push(rest), Status::kWouldBlock);
  EXPECT_EQ(out.last_pushed(), 16u);
  rest = rest.subspan(out.last_pushed());
  EXPECT_EQ(out.try_push(std::span<const Rec>()), Status::kOk);
  EXPECT_EQ(out.last_pushed(), 0u);
  std::vector<uint64_t> got;
  for (int rounds = 0; !rest.empty(); ++rounds) {
    ASSERT_LT(rounds, 1000);
    const Status s = out.try_push(rest);
    ASSERT_TRUE(s == Status::kOk || s == Status::kWouldBlock) << static_cast<int>(s);
    rest = rest.subspan(out.last_pushed());
    std::vector<uint64_t> part = drain(in);
    got.insert(got.end(), part.begin(), part.end());
  }
  ASSERT_EQ(out.close(), Status::kOk);
  while (auto batch = in.consume())
    for (const Rec& r : *batch) got.push_back(r.value);
  EXPECT_EQ(in.status(), Status::kEndOfFlow);
  ASSERT_EQ(got.size(), run.size());
  for (uint64_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i);
}

TEST(PushRunTest, ABlockedRunTimesOutSayingHowMuchWent) {
  auto spec = keyed(1);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  const std::vector<Rec> run = records(40);
  EXPECT_EQ(out.push(std::span<const Rec>(run), Clock::now() + std::chrono::milliseconds(20)),
            Status::kTimeout);
  EXPECT_EQ(out.last_pushed(), 16u);
  EXPECT_FALSE(out.error().empty());
}

TEST(PushRunTest, ReplicateFlowsGiveEveryTargetTheWholeRun) {
  auto spec = replicate<Rec>("rep-runs")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .segment_bytes(64)
                  .ring_segments(4);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  Worker w;
  std::vector<uint64_t> got[2];
  for (uint32_t t = 0; t < 2; ++t) {
    w.add(flow.target<Rec>(t), [&got, t](std::span<const Rec> batch) {
      for (const Rec& r : batch) got[t].push_back(r.value);
    });
  }
  const std::vector<Rec> run = records(203);
  ASSERT_EQ(w.push(out, run), Status::kOk);
  ASSERT_EQ(w.close(out), Status::kOk);
  ASSERT_EQ(w.run(), Status::kEndOfFlow);
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_EQ(got[t].size(), run.size()) << "target " << t;
    for (uint64_t i = 0; i < run.size(); ++i) ASSERT_EQ(got[t][i], i);
  }
}

TEST(PushRunTest, LatencyModePublishesEveryRecordOfARun) {
  auto spec = shuffle<Rec>("lat-runs")
                  .sources(testing::slots(1))
                  .targets(testing::slots(1))
                  .key(&Rec::key)
                  .optimize(Optimize::kLatency);
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  auto in = flow.target<Rec>(0);
  const std::vector<Rec> run = records(5);
  ASSERT_EQ(out.push(std::span<const Rec>(run)), Status::kOk);
  for (uint64_t i = 0; i < run.size(); ++i) {
    auto batch = in.try_consume();  // published without a flush
    ASSERT_TRUE(batch) << i;
    ASSERT_EQ(batch->size(), 1u);
    EXPECT_EQ((*batch)[0].value, i);
  }
}

TEST(PushRunTest, PushToNamesEveryRecordsTargetAndAWorkerWaitsForRoom) {
  auto spec = shuffle<Rec>("named-runs")
                  .sources(testing::slots(1))
                  .targets(testing::slots(3))
                  .segment_bytes(64)
                  .ring_segments(4)
                  .explicit_targets();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  Worker w;
  std::vector<uint64_t> got[3];
  for (uint32_t t = 0; t < 3; ++t) {
    w.add(flow.target<Rec>(t), [&got, t](std::span<const Rec> batch) {
      for (const Rec& r : batch) got[t].push_back(r.value);
    });
  }
  // 600 records, target i % 3 except every 7th to target 2: far more than
  // the rings hold, so the worker delivers while the run waits.
  const std::vector<Rec> run = records(600);
  std::vector<uint32_t> to;
  std::vector<uint64_t> want[3];
  for (uint64_t i = 0; i < run.size(); ++i) {
    to.push_back(i % 7 == 0 ? 2 : static_cast<uint32_t>(i % 3));
    want[to.back()].push_back(i);
  }
  ASSERT_EQ(w.push_to(out, to, run), Status::kOk);
  EXPECT_EQ(out.last_pushed(), run.size());
  ASSERT_EQ(w.close(out), Status::kOk);
  ASSERT_EQ(w.run(), Status::kEndOfFlow);
  for (uint32_t t = 0; t < 3; ++t) EXPECT_EQ(got[t], want[t]) << "target " << t;
}

TEST(PushRunTest, PushToStopsAtATargetOutOfRangeAndRefusesSpansOfTwoLengths) {
  auto spec = shuffle<Rec>("bad-runs")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .explicit_targets();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  const std::vector<Rec> run = records(5);
  const std::vector<uint32_t> short_to = {0, 1};
  EXPECT_EQ(out.push_to(short_to, std::span<const Rec>(run)), Status::kInvalid);
  EXPECT_EQ(out.last_pushed(), 0u);
  EXPECT_NE(out.error().find("differ in length"), std::string::npos) << out.error();
  const std::vector<uint32_t> to = {0, 1, 0, 2, 1};
  EXPECT_EQ(out.push_to(to, std::span<const Rec>(run)), Status::kInvalid);
  EXPECT_EQ(out.last_pushed(), 3u);
  EXPECT_NE(out.error().find("out of range"), std::string::npos) << out.error();
  ASSERT_EQ(out.close(), Status::kOk);
  std::vector<uint64_t> got;
  for (uint32_t t = 0; t < 2; ++t) {
    auto in = flow.target<Rec>(t);
    while (auto batch = in.consume())
      for (const Rec& r : *batch) got.push_back(r.value);
    EXPECT_EQ(in.status(), Status::kEndOfFlow);
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2}));
}

TEST(PushRunTest, ExplicitTargetsRefuseARunAndPushNothing) {
  auto spec = shuffle<Rec>("explicit-runs")
                  .sources(testing::slots(1))
                  .targets(testing::slots(2))
                  .explicit_targets();
  testing::LocalFlow flow(spec.spec());
  auto out = flow.source<Rec>(0);
  const std::vector<Rec> run = records(3);
  EXPECT_EQ(out.push(std::span<const Rec>(run)), Status::kInvalid);
  EXPECT_EQ(out.last_pushed(), 0u);
  EXPECT_NE(out.error().find("push_to"), std::string::npos) << out.error();
}

}  // namespace
}  // namespace sluice
