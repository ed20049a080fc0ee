// RSI recovery with the clients' interleaving scripted step by step: a
// one-rank job (CTest starts it with `sluice run -n 1`) whose rank is the
// memory server and drives two RsiClients itself. A client "dies" at a kill
// point by throwing (RsiOptions::test_kill_throws) and is abandoned, which
// leaves the memory exactly as a killed process would. The system tests
// (nam_test.cc) kill real processes (sluice run --kill), but where the kill
// lands in a transaction is up to the scheduler; here it is fixed at each
// of the two delicate points of a commit: after locking (rolled back) and
// after the commit point (rolled forward).
#include <gtest/gtest.h>
#include <sluice/sluice.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "layout.h"
#include "rsi.h"
#include "workload.h"

namespace sn = sluice::nam;
using namespace std::chrono_literals;

namespace {

sluice::Cluster* g_cluster = nullptr;

// A client stalled in commit() (a test hook blocks it, as a SIGSTOP would)
// at `where` until release() is called.
class Stall {
 public:
  explicit Stall(std::string where) : where_(std::move(where)) {}
  std::function<void(std::string_view)> hook() {
    return [this](std::string_view at) {
      if (at != where_ || done_) return;
      done_ = true;
      stalled_.set_value();
      go_.get_future().wait();
    };
  }
  void wait_stalled() {
    if (stalled_.get_future().wait_for(60s) != std::future_status::ready) {
      ADD_FAILURE() << "the client never reached " << where_;
      std::_Exit(1);
    }
  }
  void release() { go_.set_value(); }

 private:
  std::string where_;
  bool done_ = false;
  std::promise<void> stalled_, go_;
};

class RsiRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w_.products = 16;
    w_.record_bytes = 32;
    layout_ = sn::make_layout(w_, 1, clients(), 2, 4096);
    // Each test exposes fresh regions (a name is exposed once per job).
    layout_.prefix.append("-").append(std::to_string(++generation_));
    for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
      regions_.push_back(g_cluster->expose(layout_.region_name(layout_.tables[t].name),
                                           layout_.region_bytes(t, 0)));
      sn::load_table(layout_, w_, t, 0, regions_.back().data());
    }
    regions_.push_back(g_cluster->expose(layout_.meta_name(), layout_.meta_bytes()));
  }

  virtual uint32_t clients() const { return 2; }

  // A client that presumes others dead after 200 ms; `doomed`: it dies
  // (throws TestKilled) on its first commit at `at` (by default after
  // locking).
  std::unique_ptr<sn::RsiClient> client(uint32_t id, bool doomed = false,
                                        sn::KillPoint at = sn::KillPoint::kAfterLock) {
    sn::RsiOptions o;
    o.recovery_timeout = 200ms;
    if (doomed) {
      o.test_kill = at;
      o.test_kill_throws = true;
    }
    return std::make_unique<sn::RsiClient>(*g_cluster, layout_, id, o);
  }

  static std::vector<std::byte> value(uint8_t v) { return std::vector<std::byte>(8, std::byte{v}); }

  // begin() must come back (recovery) rather than wait for ever: a guard,
  // not a timing assertion.
  static bool begins(sn::RsiClient& c) {
    auto f = std::async(std::launch::async, [&] { c.begin(); });
    if (f.wait_for(60s) != std::future_status::ready) {
      ADD_FAILURE() << "begin() still waiting after 60 s: the dead client was never recovered";
      std::_Exit(1);  // the thread cannot be joined
    }
    f.get();
    return true;
  }

  // Writes product `key` until the commit goes through: each conflict on
  // the same lock counts towards its age, and once it has been held for the
  // recovery timeout its holder is recovered. The deadline is a guard, not
  // a timing assertion.
  static bool commits_past_a_lock(sn::RsiClient& c, uint64_t key, const std::vector<std::byte>& v) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      begins(c);
      c.write(sn::kProducts, key, v);
      if (c.commit() == sn::Outcome::kCommitted) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Starts c's write of product `key` and its commit on another thread;
  // returns once the commit is stalled.
  static std::future<sn::Outcome> commit_stalled(sn::RsiClient& c, Stall& stall, uint64_t key,
                                                 const std::vector<std::byte>& v) {
    c.begin();
    c.write(sn::kProducts, key, v);
    auto f = std::async(std::launch::async, [&c] { return c.commit(); });
    stall.wait_stalled();
    return f;
  }

  // A client stalled by `stall` (rsi.h, RsiOptions::test_pause).
  std::unique_ptr<sn::RsiClient> stalling_client(uint32_t id, Stall& stall) {
    sn::RsiOptions o;
    o.recovery_timeout = 200ms;
    o.test_pause = stall.hook();
    return std::make_unique<sn::RsiClient>(*g_cluster, layout_, id, o);
  }

  static inline int generation_ = 0;
  sn::WorkloadOptions w_;
  sn::Layout layout_;
  std::vector<sluice::MemoryRegion> regions_;
};

// Client 1 locks product 3 with timestamp 2 and dies before installing.
// Client 0, whose snapshot came first, then conflicts on that lock with its
// timestamp 1: the retry must wait for timestamp 2, and nothing is finished
// after it, so only recovery can end the wait. (begin() used to look for a
// stalled timestamp only when something after it was finished, and spun for
// ever here: nam.nam_test.ofi hung this way once in CI.)
TEST_F(RsiRecoveryTest, AConflictOnADeadClientsLockWithAnEarlierTimestampRecoversIt) {
  auto c0 = client(0);
  auto c1 = client(1, true);

  c0->begin();
  c0->write(sn::kProducts, 3, value(0xa0));
  c1->begin();
  c1->write(sn::kProducts, 3, value(0xb1));
  EXPECT_THROW(c1->commit(), sn::TestKilled);
  EXPECT_EQ(c0->commit(), sn::Outcome::kConflict);

  ASSERT_TRUE(begins(*c0));
  EXPECT_EQ(c0->stats().clients_recovered, 1u);
  EXPECT_EQ(c0->stats().recovered_back, 1u) << "the dead client's lock was rolled back";
  EXPECT_GE(c0->read_timestamp(), 2u) << "the snapshot includes the finished timestamp 2";
  c0->write(sn::kProducts, 3, value(0xa2));
  EXPECT_EQ(c0->commit(), sn::Outcome::kCommitted);
  // A fresh transaction sees client 0's value, and client 1's never.
  ASSERT_TRUE(begins(*c0));
  std::vector<std::byte> got(8);
  ASSERT_TRUE(c0->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0xa2));
  c0->abort();
  EXPECT_EQ(c0->header(sn::kProducts, 3) & sn::kLockBit, 0u);
}

// Client 1 writes products 4 and 5 and dies after setting its timestamp
// bit (the commit point), before unlocking: the versions are installed and
// the transaction committed, but both records stay locked. Client 0's write
// of product 4 conflicts on that lock until it has seen it held for the
// recovery timeout; then it recovers client 1, which rolls both records
// forward (unlocks them, keeping client 1's versions), and commits.
TEST_F(RsiRecoveryTest, AClientDeadAfterItsCommitBitIsRolledForward) {
  auto c0 = client(0);
  auto c1 = client(1, true, sn::KillPoint::kAfterCommitBit);

  c1->begin();
  c1->write(sn::kProducts, 4, value(0xb4));
  c1->write(sn::kProducts, 5, value(0xb5));
  EXPECT_THROW(c1->commit(), sn::TestKilled);
  EXPECT_NE(c0->header(sn::kProducts, 4) & sn::kLockBit, 0u);
  EXPECT_NE(c0->header(sn::kProducts, 5) & sn::kLockBit, 0u);

  ASSERT_TRUE(commits_past_a_lock(*c0, 4, value(0xa4))) << "client 1's locks were never recovered";
  EXPECT_EQ(c0->stats().clients_recovered, 1u);
  EXPECT_EQ(c0->stats().recovered_forward, 2u) << "both of client 1's records rolled forward";
  EXPECT_EQ(c0->stats().recovered_back, 0u);
  ASSERT_TRUE(begins(*c0));
  std::vector<std::byte> got(8);
  ASSERT_TRUE(c0->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, value(0xb5)) << "client 1's committed version stays";
  ASSERT_TRUE(c0->read(sn::kProducts, 4, got));
  EXPECT_EQ(got, value(0xa4));
  c0->abort();
  EXPECT_EQ(c0->header(sn::kProducts, 5) & sn::kLockBit, 0u);
}

// Client 1 locks product 3 and stalls before installing; client 0 conflicts
// on the lock until it has seen it held for the recovery timeout, recovers
// client 1 (rolls the record back) and commits product 3 into the version
// client 1 was about to install over. Client 1 then resumes: it must not
// overwrite that newer commit (it used to: the record's header then named
// client 0's commit and no version held it, an acknowledged write lost).
// Its claim of the version fails, and it learns it was fenced.
TEST_F(RsiRecoveryTest, AClientStalledPastRecoveryCannotOverwriteANewerCommitWhenItResumes) {
  Stall stall("after-lock");
  auto c1 = stalling_client(1, stall);
  auto c0 = client(0);

  auto zombie = commit_stalled(*c1, stall, 3, value(0xb1));

  ASSERT_TRUE(commits_past_a_lock(*c0, 3, value(0xa2))) << "client 1 was never recovered";
  EXPECT_EQ(c0->stats().recovered_back, 1u);
  const uint64_t committed = c0->header(sn::kProducts, 3);

  stall.release();
  EXPECT_THROW(zombie.get(), sn::FencedError);

  ASSERT_TRUE(begins(*c0));
  std::vector<std::byte> got(8);
  ASSERT_TRUE(c0->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0xa2)) << "client 0's committed value was overwritten";
  c0->abort();
  EXPECT_EQ(c0->header(sn::kProducts, 3), committed) << "the header still names client 0's commit";
  // The record goes on taking commits (its versions were not lost to the claim).
  for (uint8_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(begins(*c0));
    c0->write(sn::kProducts, 3, value(static_cast<uint8_t>(0xc0 + i)));
    ASSERT_EQ(c0->commit(), sn::Outcome::kCommitted);
  }
  ASSERT_TRUE(begins(*c0));
  ASSERT_TRUE(c0->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0xc2));
  c0->abort();
}

// Client 1 installs product 3 and stalls before its commit point; client 0
// recovers it (its timestamp held everyone back) and reads product 3: the
// installed version is a fenced commit's, never visible. Client 0 then
// writes product 3 over it, and client 1, resumed, is told it was fenced
// and leaves client 0's version alone when it gives its claim back.
TEST_F(RsiRecoveryTest, AVersionInstalledByAClientFencedBeforeItsCommitPointIsNeverRead) {
  Stall stall("after-install");
  auto c1 = stalling_client(1, stall);
  auto c0 = client(0);

  auto zombie = commit_stalled(*c1, stall, 3, value(0xb1));
  // Client 0 commits elsewhere; its next snapshot must include its own
  // commit, which client 1's pending timestamp holds back until recovery.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(begins(*c0));
    c0->write(sn::kProducts, 5, value(0xa5));
    ASSERT_EQ(c0->commit(), sn::Outcome::kCommitted);
  }
  ASSERT_TRUE(begins(*c0));
  EXPECT_EQ(c0->stats().clients_recovered, 1u);
  std::vector<std::byte> got(8);
  ASSERT_TRUE(c0->read(sn::kProducts, 3, got));
  EXPECT_NE(got, value(0xb1)) << "a fenced commit's version was read";
  c0->write(sn::kProducts, 3, value(0xa3));
  ASSERT_EQ(c0->commit(), sn::Outcome::kCommitted);

  stall.release();
  EXPECT_THROW(zombie.get(), sn::FencedError);
  ASSERT_TRUE(begins(*c0));
  ASSERT_TRUE(c0->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0xa3));
  c0->abort();
  EXPECT_EQ(c0->header(sn::kProducts, 3) & sn::kLockBit, 0u);
}

// Three clients (timestamps: client j has j+1, j+4, j+7, ...). Client 2
// commits at 3; client 1 gives up its timestamp 2 (below that commit), locks
// product 5 at 5 and dies; client 0 conflicts on it at 1. Its retry waits for
// timestamp 5 while its own next one, 4, is below it: 4 must be given up
// too, or the lowest unfinished timestamp stays client 0's own and the dead
// client behind it is never looked at.
class RsiRecoveryThreeClientsTest : public RsiRecoveryTest {
 protected:
  uint32_t clients() const override { return 3; }
};

TEST_F(RsiRecoveryThreeClientsTest, AWaitPastTheClientsOwnNextTimestampGivesItUp) {
  auto c0 = client(0);
  auto c1 = client(1, true);
  auto c2 = client(2);

  c0->begin();
  c0->write(sn::kProducts, 5, value(0xa0));
  c2->begin();
  c2->write(sn::kProducts, 9, value(0xc3));
  ASSERT_EQ(c2->commit(), sn::Outcome::kCommitted);
  c1->begin();
  EXPECT_EQ(c1->stats().burned, 1u) << "timestamp 2 is below the commit at 3";
  c1->write(sn::kProducts, 5, value(0xb5));
  EXPECT_THROW(c1->commit(), sn::TestKilled);
  EXPECT_EQ(c0->commit(), sn::Outcome::kConflict);

  ASSERT_TRUE(begins(*c0));
  EXPECT_EQ(c0->stats().burned, 1u) << "timestamp 4 is below the awaited 5";
  EXPECT_EQ(c0->stats().clients_recovered, 1u);
  EXPECT_EQ(c0->stats().recovered_back, 1u);
  EXPECT_GE(c0->read_timestamp(), 5u);
  c0->write(sn::kProducts, 5, value(0xa7));
  EXPECT_EQ(c0->commit(), sn::Outcome::kCommitted);
  ASSERT_TRUE(begins(*c0));
  std::vector<std::byte> got(8);
  ASSERT_TRUE(c0->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, value(0xa7));
  ASSERT_TRUE(c0->read(sn::kProducts, 9, got));
  EXPECT_EQ(got, value(0xc3));
  c0->abort();
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sluice::Cluster cluster = sluice::Cluster::join();
  g_cluster = &cluster;
  const int code = RUN_ALL_TESTS();
  g_cluster = nullptr;
  return code;
}
