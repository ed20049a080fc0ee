// Spare client slots (apps/nam/spares.h) with the clients' steps scripted: a
// one-rank job (CTest starts it with `sluice run -n 1`) whose rank is the
// memory server and drives a writer and a spare slot's client itself, and
// the claim words' transitions.
//
// Timestamps: the writer (client 0) owns 1, 3, 5, ...; the spare slot
// (client 1, the layout's last) 2, 4, ... parked from 2 at the start.
#include "spares.h"

#include <gtest/gtest.h>
#include <sluice/sluice.h>

#include <chrono>
#include <memory>
#include <vector>

#include "layout.h"
#include "rsi.h"
#include "workload.h"

namespace sn = sluice::nam;
using namespace std::chrono_literals;

namespace {

sluice::Cluster* g_cluster = nullptr;

class SpareSlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w_.products = 16;
    w_.record_bytes = 32;
    layout_ = sn::make_layout(w_, 1, 2, 2, 4096);
    layout_.spares = 1;
    layout_.prefix.append("-spare-").append(std::to_string(++generation_));
    // As memory server 0 of sluice-nam sets it up (the spare slot parked).
    regions_ = sn::expose_database(*g_cluster, layout_, w_, 0, /*rsi=*/true,
                                   sn::free_slots(*g_cluster, layout_, 1));
    // A writer held back this long would recover the spare slot as dead.
    options_.recovery_timeout = 200ms;
    writer_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 0, options_);
  }

  std::unique_ptr<sn::RsiClient> spare() {
    sn::RsiOptions o = options_;
    o.starts_parked = true;
    return std::make_unique<sn::RsiClient>(*g_cluster, layout_, 1, o);
  }
  static std::vector<std::byte> value(uint8_t v) {
    return std::vector<std::byte>(32, std::byte{v});
  }
  void write(sn::RsiClient& c, uint64_t key, uint8_t v) {
    c.begin();
    c.write(sn::kProducts, key, value(v));
    ASSERT_EQ(c.commit(), sn::Outcome::kCommitted);
  }
  std::vector<std::byte> read(sn::RsiClient& c, uint64_t key) {
    std::vector<std::byte> got(32);
    c.begin_read_only();
    EXPECT_TRUE(c.read(sn::kProducts, key, got));
    EXPECT_EQ(c.commit(), sn::Outcome::kCommitted);
    return got;
  }

  static inline int generation_ = 0;
  sn::WorkloadOptions w_;
  sn::Layout layout_;
  sn::RsiOptions options_;
  std::vector<sluice::MemoryRegion> regions_;
  std::unique_ptr<sn::RsiClient> writer_;
};

// While nobody runs the spare slot, the writer commits 20 times and each
// next snapshot sees its last commit at once: the slot's pending
// timestamps hold no one back, and no one is recovered. (With the slot not
// parked at the start, the writer's second begin() waits 200 ms and
// recovers it as a dead client.) A client that then takes the slot gives
// up the timestamps the writer passed, sees all 20 commits, and its own
// write is seen by the writer.
TEST_F(SpareSlotTest, AnIdleSpareSlotHoldsNoOneBackAndItsClientSeesEveryEarlierCommit) {
  const auto t0 = std::chrono::steady_clock::now();
  for (uint8_t i = 1; i <= 20; ++i) {
    write(*writer_, 5, i);
    EXPECT_EQ(read(*writer_, 5), value(i)) << "commit " << int(i);
  }
  EXPECT_EQ(writer_->stats().clients_recovered, 0u);
  EXPECT_EQ(writer_->stats().commits, 20u);
  std::printf(
      "20 commits and reads beside an idle spare slot: %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  std::unique_ptr<sn::RsiClient> s = spare();
  EXPECT_TRUE(s->parked());
  s->begin();  // read-write: unparks
  EXPECT_FALSE(s->parked());
  EXPECT_GE(s->read_timestamp(), 39u) << "the writer's 20th commit has timestamp 39";
  std::vector<std::byte> got(32);
  ASSERT_TRUE(s->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, value(20));
  s->write(sn::kProducts, 5, value(0x50));
  ASSERT_EQ(s->commit(), sn::Outcome::kCommitted);
  EXPECT_GE(s->stats().burned, 19u) << "the slot's timestamps below the writer's commits";
  EXPECT_EQ(read(*writer_, 5), value(0x50));
  write(*writer_, 6, 0x51);
  EXPECT_EQ(read(*s, 6), value(0x51));
  EXPECT_EQ(writer_->stats().clients_recovered + s->stats().clients_recovered, 0u);
  s->retire();
  writer_->retire();
}

// A spare slot nobody took is retired from its first timestamp at the
// run's end (the reporter's close): the sweep of unretired clients then
// finds none to recover. Left parked instead, the sweep would count it
// as a dead client.
TEST_F(SpareSlotTest, AClosedSpareSlotIsRetiredNotRecovered) {
  write(*writer_, 3, 1);
  spare()->retire();
  write(*writer_, 3, 2);
  EXPECT_EQ(read(*writer_, 3), value(2));
  writer_->retire();
  sn::RsiClient sweeper(*g_cluster, layout_, 0, options_);
  EXPECT_EQ(sweeper.recover_unretired(), 0u);
}

// The claim words: free -> running (claim) -> done (finish); free -> closed
// (settle); each transition once, whoever tries it.
TEST(SpareClaimTest, ClaimWordsMoveFromFreeToRunningToDoneOrFromFreeToClosedOnce) {
  sluice::MemoryRegion area = g_cluster->expose("spare-claims", 64);
  sluice::RemoteRegion r = g_cluster->open_region("spare-claims", g_cluster->rank());
  const uint32_t me = g_cluster->rank(), incarnation = g_cluster->incarnation(me);
  bool over = true;
  // Area A: 3 slots at offset 0.
  EXPECT_EQ(sn::claim_spares(r, 0, 3, 2, me, incarnation, &over), (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(over);
  // Another process (a later incarnation of this rank, not the live one)
  // takes the third; then every slot is taken.
  EXPECT_EQ(sn::claim_spares(r, 0, 3, 2, me, incarnation + 5, &over), (std::vector<uint32_t>{2}));
  EXPECT_TRUE(sn::claim_spares(r, 0, 3, 2, me, incarnation + 6, &over).empty());
  EXPECT_FALSE(over) << "taken, not closed";
  sn::finish_spare(r, 0, 0, me, incarnation);
  EXPECT_THROW(sn::finish_spare(r, 0, 0, me, incarnation), sn::NamError);
  EXPECT_THROW(sn::finish_spare(r, 0, 1, me, incarnation + 1), sn::NamError)
      << "slot 1 is this incarnation's, not another's";
  sn::SpareClaim c = sn::settle_spare(*g_cluster, r, 0, 0);
  EXPECT_EQ(c.state, sn::SpareState::kDone);
  EXPECT_EQ(c.rank, me);
  EXPECT_EQ(c.incarnation, incarnation);
  // Slot 2's process is not the rank's live one: lost while it ran.
  c = sn::settle_spare(*g_cluster, r, 0, 2);
  EXPECT_EQ(c.state, sn::SpareState::kRunning);
  EXPECT_EQ(c.incarnation, incarnation + 5);
  // Area B: 2 slots at offset 32. One claimed, then the reporter closes the
  // other: a later claimant finds the run over; the claimed one stays its
  // process's to finish.
  EXPECT_EQ(sn::claim_spares(r, 32, 2, 1, me, incarnation, &over), (std::vector<uint32_t>{0}));
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 32, 1).state, sn::SpareState::kClosed);
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 32, 1).state, sn::SpareState::kClosed);
  EXPECT_TRUE(sn::claim_spares(r, 32, 2, 2, me, incarnation + 1, &over).empty());
  EXPECT_TRUE(over);
  sn::finish_spare(r, 32, 0, me, incarnation);
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 32, 0).state, sn::SpareState::kDone);
}

// Slots that a rank's first process runs (owned, as memory server 0's
// init_claims marks them) are passed over by a claim and left as they are
// by the reporter's settling; the free ones around them are claimed.
TEST(SpareClaimTest, OwnedSlotsAreNeitherClaimedNorClosed) {
  sluice::MemoryRegion area = g_cluster->expose("owned-claims", 32);
  sn::init_claims(area.data(), {0, 1, 0, 1});
  sluice::RemoteRegion r = g_cluster->open_region("owned-claims", g_cluster->rank());
  const uint32_t me = g_cluster->rank(), incarnation = g_cluster->incarnation(me);
  bool over = true;
  EXPECT_EQ(sn::claim_spares(r, 0, 4, 4, me, incarnation, &over), (std::vector<uint32_t>{1, 3}));
  EXPECT_FALSE(over);
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 0, 0).state, sn::SpareState::kOwned);
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 0, 2).state, sn::SpareState::kOwned);
  uint64_t word = 0;
  ASSERT_EQ(r.read(16, std::as_writable_bytes(std::span(&word, 1))), sluice::Status::kOk);
  EXPECT_EQ(sn::decode_claim(word).state, sn::SpareState::kOwned) << "settling changed it";
  sn::finish_spare(r, 0, 1, me, incarnation);
  EXPECT_EQ(sn::settle_spare(*g_cluster, r, 0, 1).state, sn::SpareState::kDone);
}

// close_spare (2PC's memory server 0 at the run's end): closes a free slot
// once, leaves a claimed, an owned or a done one as it is and says which,
// and a claim after the close finds the run over.
TEST(SpareClaimTest, CloseSpareClosesOnlyAFreeSlot) {
  sluice::MemoryRegion area = g_cluster->expose("close-claims", 32);
  sn::init_claims(area.data(), {1, 1, 0, 1});
  sluice::RemoteRegion r = g_cluster->open_region("close-claims", g_cluster->rank());
  const uint32_t me = g_cluster->rank(), incarnation = g_cluster->incarnation(me);
  bool over = true;
  EXPECT_EQ(sn::claim_spares(r, 0, 4, 1, me, incarnation, &over), (std::vector<uint32_t>{0}));
  sn::SpareClaim c = sn::close_spare(r, 0, 0);
  EXPECT_EQ(c.state, sn::SpareState::kRunning);
  EXPECT_EQ(c.rank, me);
  EXPECT_EQ(c.incarnation, incarnation);
  EXPECT_EQ(sn::close_spare(r, 0, 1).state, sn::SpareState::kClosed);
  EXPECT_EQ(sn::close_spare(r, 0, 1).state, sn::SpareState::kClosed) << "closed once, stays";
  EXPECT_EQ(sn::close_spare(r, 0, 2).state, sn::SpareState::kOwned);
  EXPECT_TRUE(sn::claim_spares(r, 0, 4, 2, me, incarnation + 1, &over).empty());
  EXPECT_TRUE(over) << "slot 1 closed: the run is over for a later claimant";
  sn::finish_spare(r, 0, 0, me, incarnation);
  EXPECT_EQ(sn::close_spare(r, 0, 0).state, sn::SpareState::kDone);
  EXPECT_EQ(sn::close_spare(r, 0, 3).state, sn::SpareState::kClosed);
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
