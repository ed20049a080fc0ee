// Membership views at the registry and its clients: every loss, departure
// and rejoin makes the next epoch, every client learns it, and a gather
// scoped to one view completes for all of its members alike or fails for all
// of them with kViewChanged (never a smaller result).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "registry_fixture.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

class RegistryViewsTest : public RegistryFixture {
 protected:
  // Throws what gather() throws, as its code.
  static ErrorCode gather_error(RegistryClient& c, const std::string& name, uint64_t epoch,
                                std::string* text = nullptr) {
    try {
      (void)c.gather(name, epoch, "x", in(10s));
    } catch (const Error& e) {
      if (text != nullptr) *text = e.what();
      return e.code();
    }
    ADD_FAILURE() << "gather '" << name << "' did not fail";
    return ErrorCode::kInternal;
  }
};

TEST_F(RegistryViewsTest, EveryMemberGetsEveryValueInRankOrderAndNamesAreReusable) {
  start(3);
  auto c0 = join(0, 3);
  auto c1 = join(1, 3);
  auto c2 = join(2, 3);
  for (int round = 0; round < 20; ++round) {
    auto f1 = std::async(std::launch::async, [&] {
      return c1->gather("g", 0, "one" + std::to_string(round), in(10s));
    });
    auto f2 = std::async(std::launch::async, [&] {
      return c2->gather("g", 0, "two" + std::to_string(round), in(10s));
    });
    const GatheredMsg g0 = c0->gather("g", 0, "zero" + std::to_string(round), in(10s));
    const GatheredMsg g1 = f1.get();
    const GatheredMsg g2 = f2.get();
    EXPECT_EQ(g0.epoch, 0u);
    EXPECT_EQ(g0.ranks, (std::vector<uint32_t>{0, 1, 2}));
    const std::vector<std::string> want{"zero" + std::to_string(round),
                                        "one" + std::to_string(round),
                                        "two" + std::to_string(round)};
    EXPECT_EQ(g0.values, want);
    EXPECT_EQ(g1.values, want);
    EXPECT_EQ(g2.values, want);
  }
}

TEST_F(RegistryViewsTest, ALossMakesTheNextEpochAndFailsAPendingGatherForEveryMember) {
  start(3);
  auto c0 = join(0, 3);
  auto c1 = join(1, 3);
  auto c2 = join(2, 3);
  EXPECT_EQ(c0->peers().epoch(), 0u);
  auto pending = std::async(std::launch::async, [&] {
    std::string text;
    const ErrorCode code = gather_error(*c0, "g", 0, &text);
    return std::make_pair(code, text);
  });
  // Rank 1's call arrives too; rank 2 leaves instead of calling.
  auto pending1 = std::async(std::launch::async, [&] { return gather_error(*c1, "g", 0); });
  std::this_thread::sleep_for(100ms);  // let both calls reach the registry (either order is fine)
  c2.reset();
  const auto [code, text] = pending.get();
  EXPECT_EQ(code, ErrorCode::kViewChanged) << text;
  EXPECT_NE(text.find("view 1"), std::string::npos) << text;
  EXPECT_NE(text.find("members 0,1"), std::string::npos) << text;
  EXPECT_EQ(pending1.get(), ErrorCode::kViewChanged);
  // The new view arrived before the failure did.
  const PeerTable::ViewState v = c0->peers().view();
  EXPECT_EQ(v.epoch, 1u);
  EXPECT_EQ(v.members, (std::vector<uint32_t>{0, 1}));
  // A call in the old view fails at once; in the new one it completes
  // without the lost rank, counting from 0 again.
  EXPECT_EQ(gather_error(*c0, "g", 0), ErrorCode::kViewChanged);
  auto f1 = std::async(std::launch::async, [&] { return c1->gather("g", 1, "b", in(10s)); });
  const GatheredMsg g = c0->gather("g", 1, "a", in(10s));
  EXPECT_EQ(g.epoch, 1u);
  EXPECT_EQ(g.ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(g.values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f1.get().values, g.values);
}

// (A rejoin's epoch is proved through `sluice run --restarts` in
// tests/membership, where a real process dies and comes back.)
TEST_F(RegistryViewsTest, ADepartureMakesTheNextEpochAsALossDoes) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  ASSERT_EQ(c1->peers().epoch(), 0u);
  EXPECT_TRUE(c1->leave(in(5s)));
  ASSERT_TRUE(c0->peers().await_epoch(0, std::chrono::steady_clock::now() + 5s));
  EXPECT_EQ(c0->peers().view().members, (std::vector<uint32_t>{0}));
  std::string text;
  EXPECT_EQ(gather_error(*c0, "g", 0, &text), ErrorCode::kViewChanged) << text;
  EXPECT_NE(text.find("view 1"), std::string::npos) << text;
  // Alone in view 1, rank 0's gather completes at once.
  EXPECT_EQ(c0->gather("g", 1, "solo", in(5s)).ranks, (std::vector<uint32_t>{0}));
}

// ClientOptions::on_epoch (what `sluice top` shows through the counters
// area) hears every change of the view once, with its number.
TEST_F(RegistryViewsTest, OnEpochHearsEveryChangeOnce) {
  start(3);
  std::mutex mu;
  std::vector<uint64_t> heard;
  ClientOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.on_epoch = [&](uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back(epoch);
  };
  auto c0 = RegistryClient::connect(info(0, 3), o);
  auto c1 = join(1, 3);
  auto c2 = join(2, 3);
  c2.reset();  // dies: view 1
  ASSERT_TRUE(c0->peers().await_epoch(0, std::chrono::steady_clock::now() + 5s));
  EXPECT_TRUE(c1->leave(in(5s)));  // leaves: view 2
  ASSERT_TRUE(c0->peers().await_epoch(1, std::chrono::steady_clock::now() + 5s));
  // on_epoch runs right after the view is stored: wait for its second call.
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (heard.size() >= 2 || std::chrono::steady_clock::now() >= until) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(heard, (std::vector<uint64_t>{1, 2}));
}

TEST_F(RegistryViewsTest, AGatherTimesOutNamingTheMissingMemberAndDoesNotCount) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  std::string text;
  try {
    (void)c0->gather("g", 0, "first", in(300ms));
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    text = e.what();
  }
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
  // The timed-out call did not count: the next one meets rank 1's first.
  auto f1 = std::async(std::launch::async, [&] { return c1->gather("g", 0, "one", in(10s)); });
  const GatheredMsg g = c0->gather("g", 0, "second", in(10s));
  EXPECT_EQ(g.values, (std::vector<std::string>{"second", "one"}));
  EXPECT_EQ(f1.get().values, g.values);
}

TEST_F(RegistryViewsTest, ASecondCallWhileTheFirstWaitsIsRefused) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  auto first = std::async(std::launch::async, [&] { return c0->gather("g", 0, "a", in(10s)); });
  std::this_thread::sleep_for(100ms);
  std::string text;
  EXPECT_EQ(gather_error(*c0, "g", 0, &text), ErrorCode::kInvalidArgument) << text;
  EXPECT_NE(text.find("one call of a name at a time"), std::string::npos) << text;
  (void)c1->gather("g", 0, "b", in(10s));
  EXPECT_EQ(first.get().values, (std::vector<std::string>{"a", "b"}));
}

// Throws what declare_flow() throws, as its code.
ErrorCode declare_error(RegistryClient& c, const std::string& name, uint64_t epoch,
                        std::string* text = nullptr) {
  try {
    c.declare_flow(name, "spec\n", {0, 1, 2}, std::chrono::steady_clock::now() + 10s, epoch);
  } catch (const Error& e) {
    if (text != nullptr) *text = e.what();
    return e.code();
  }
  return ErrorCode::kInternal;  // (it agreed)
}

// Ranks 0, 1 and 2 declare `name` in view `epoch` at once; true if all three
// agreed.
bool all_three_agree(RegistryClient& c0, RegistryClient& c1, RegistryClient& c2,
                     const std::string& name, uint64_t epoch) {
  auto f1 = std::async(std::launch::async, [&] { return declare_error(c1, name, epoch); });
  auto f2 = std::async(std::launch::async, [&] { return declare_error(c2, name, epoch); });
  const ErrorCode e0 = declare_error(c0, name, epoch);
  const ErrorCode e1 = f1.get(), e2 = f2.get();
  return e0 == ErrorCode::kInternal && e1 == ErrorCode::kInternal && e2 == ErrorCode::kInternal;
}

// A flow declared in a view (Cluster::declare(view, spec)) agrees within it
// or fails with kViewChanged for every participant that declared: a view
// change while some wait, or a declaration in a view that is over. An
// unscoped declaration of the same participants is untouched by the change.
TEST_F(RegistryViewsTest, AFlowDeclaredInAViewFailsForEveryDeclarerWhenTheViewChangesFirst) {
  start(5);
  auto c0 = join(0, 5);
  auto c1 = join(1, 5);
  auto c2 = join(2, 5);
  auto c3 = join(3, 5);
  auto c4 = join(4, 5);
  // Complete in view 0: all three declare.
  EXPECT_TRUE(all_three_agree(*c0, *c1, *c2, "f@0", 0));
  // Ranks 0 and 1 declare g@0 and wait for rank 2; rank 3 (no participant)
  // leaves: view 1. Both fail alike, naming the new view.
  auto p0 = std::async(std::launch::async, [&] {
    std::string text;
    const ErrorCode code = declare_error(*c0, "g@0", 0, &text);
    return std::make_pair(code, text);
  });
  auto p1 = std::async(std::launch::async, [&] { return declare_error(*c1, "g@0", 0); });
  std::this_thread::sleep_for(100ms);  // let both reach the registry
  EXPECT_TRUE(c3->leave(in(5s)));
  const auto [code, text] = p0.get();
  EXPECT_EQ(code, ErrorCode::kViewChanged) << text;
  EXPECT_NE(text.find("flow 'g@0'"), std::string::npos) << text;
  EXPECT_NE(text.find("view 1"), std::string::npos) << text;
  EXPECT_EQ(p1.get(), ErrorCode::kViewChanged);
  // Rank 2, late, declares in view 0: refused at once.
  std::string late;
  EXPECT_EQ(declare_error(*c2, "g@0", 0, &late), ErrorCode::kViewChanged) << late;
  EXPECT_NE(late.find("the job is in view 1"), std::string::npos) << late;
  // The same in view 1 agrees.
  EXPECT_TRUE(all_three_agree(*c0, *c1, *c2, "g@1", 1));
  // An unscoped declaration waits through a view change (rank 4 leaves:
  // view 2) that loses none of its participants.
  auto u0 = std::async(std::launch::async, [&] { return declare_error(*c0, "u", kUnscopedEpoch); });
  auto u1 = std::async(std::launch::async, [&] { return declare_error(*c1, "u", kUnscopedEpoch); });
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(c4->leave(in(5s)));
  ASSERT_TRUE(c2->peers().await_epoch(1, std::chrono::steady_clock::now() + 5s));
  EXPECT_EQ(declare_error(*c2, "u", kUnscopedEpoch), ErrorCode::kInternal);
  EXPECT_EQ(u0.get(), ErrorCode::kInternal);
  EXPECT_EQ(u1.get(), ErrorCode::kInternal);
}

// A flow that agreed in a view may still be set up when the view changes; a
// participant that gave it up for the new view never puts its keys, so
// every wait for a key of it fails with kViewChanged. Keys of an unscoped
// flow are still awaited.
TEST_F(RegistryViewsTest, AWaitForAKeyOfAFlowOfAnEndedViewFailsWithViewChanged) {
  start(4);
  auto c0 = join(0, 4);
  auto c1 = join(1, 4);
  auto c2 = join(2, 4);
  auto c3 = join(3, 4);
  ASSERT_TRUE(all_three_agree(*c0, *c1, *c2, "k@0", 0));
  auto scoped = std::async(std::launch::async, [&] {
    try {
      (void)c0->get("flow/k@0/shm/1", std::chrono::steady_clock::now() + 10s, 1);
    } catch (const Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(ErrorCode::kInternal, std::string("the key arrived"));
  });
  auto unscoped = std::async(std::launch::async, [&] {
    return c1->get("flow/plain/shm/2", std::chrono::steady_clock::now() + 10s, 2);
  });
  std::this_thread::sleep_for(100ms);  // both waits reach the registry
  EXPECT_TRUE(c3->leave(in(5s)));      // view 1
  const auto [code, text] = scoped.get();
  EXPECT_EQ(code, ErrorCode::kViewChanged) << text;
  EXPECT_NE(text.find("while it was being set up in view 0"), std::string::npos) << text;
  c2->put("flow/plain/shm/2", "v");
  EXPECT_EQ(unscoped.get(), "v");
}

TEST(GatherProtocolTest, MessagesRoundTripAndAHostileCountIsRejected) {
  const GatherMsg m{"name", 7, 100, std::string("v\0w", 3)};
  GatherMsg back;
  ASSERT_TRUE(decode(encode(m), &back));
  EXPECT_EQ(back.name, m.name);
  EXPECT_EQ(back.epoch, 7u);
  EXPECT_EQ(back.timeout_ms, 100u);
  EXPECT_EQ(back.value, m.value);
  const GatheredMsg g{3, {0, 2}, {"a", ""}};
  GatheredMsg gback;
  ASSERT_TRUE(decode(encode(g), &gback));
  EXPECT_EQ(gback.epoch, 3u);
  EXPECT_EQ(gback.ranks, g.ranks);
  EXPECT_EQ(gback.values, g.values);
  // A count far beyond the bytes that follow is malformed, not an allocation.
  Writer w;
  w.u64(1);
  w.u32(0xFFFFFFFFu);
  EXPECT_FALSE(decode(w.take(), &gback));
  DeclareMsg d{"f@3", "spec", {0, 2}, 100, 3};
  DeclareMsg dback;
  ASSERT_TRUE(decode(encode(d), &dback));
  EXPECT_EQ(dback.epoch, 3u);
  EXPECT_EQ(dback.participants, d.participants);
  d.epoch = kUnscopedEpoch;
  ASSERT_TRUE(decode(encode(d), &dback));
  EXPECT_EQ(dback.epoch, kUnscopedEpoch);
  const PeerEventMsg e{1, PeerState::kDied, "gone", "h", 9, 2, 5};
  PeerEventMsg eback;
  ASSERT_TRUE(decode(encode(e), &eback));
  EXPECT_EQ(eback.epoch, 5u);
  EXPECT_EQ(eback.incarnation, 2u);
}

}  // namespace
}  // namespace sluice::control
