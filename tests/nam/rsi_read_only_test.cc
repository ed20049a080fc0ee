// RSI's read-only transactions (RsiClient::begin_read_only) with the
// clients' interleaving scripted step by step: a one-rank job (CTest starts
// it with `sluice run -n 1`) whose rank is the memory server and drives a
// writer and a long reader itself.
//
// Timestamps: the writer (client 0) owns 1, 3, 5, ...; the reader (client 1)
// 2, 4, ... A reader that began with begin() holds its pending 2 (then 4,
// ...) below every later commit, so the writer's read timestamp stops there
// and its next begin() waits for its own last commit to become visible
// (read-your-writes) until recovery, after 200 ms, presumes the reader dead.
// A reader that began with begin_read_only() is parked: the writer passes
// its timestamps and never waits for it.
#include <gtest/gtest.h>
#include <sluice/sluice.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "layout.h"
#include "rsi.h"
#include "workload.h"

namespace sn = sluice::nam;
using namespace std::chrono_literals;

namespace {

sluice::Cluster* g_cluster = nullptr;

class RsiReadOnlyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w_.products = 16;
    w_.record_bytes = 32;
    layout_ = sn::make_layout(w_, 1, 2, 2, 4096);
    layout_.overflow_entries = 64;
    layout_.prefix.append("-ro-").append(std::to_string(++generation_));
    for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
      regions_.push_back(g_cluster->expose(layout_.region_name(layout_.tables[t].name),
                                           layout_.region_bytes(t, 0)));
      sn::load_table(layout_, w_, t, 0, regions_.back().data());
      regions_.push_back(g_cluster->expose(layout_.overflow_name(layout_.tables[t].name),
                                           layout_.overflow_region_bytes(t)));
    }
    regions_.push_back(g_cluster->expose(layout_.meta_name(), layout_.meta_bytes()));
    sn::RsiOptions o;
    o.recovery_timeout = 200ms;  // a writer held back this long recovers the reader
    writer_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 0, o);
    reader_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 1, o);
  }

  std::vector<std::byte> loaded(uint64_t key) const {
    const std::byte* slot = regions_.front().data() + layout_.slot_offset(sn::kProducts, key);
    const std::byte* v = slot + layout_.version_offset(sn::kProducts, 0) + 16;
    return std::vector<std::byte>(v, v + 32);
  }
  static std::vector<std::byte> value(uint8_t v) {
    return std::vector<std::byte>(32, std::byte{v});
  }

  void write_all(sn::RsiClient& c, const std::vector<uint64_t>& keys, uint8_t v) {
    c.begin();
    for (uint64_t k : keys) c.write(sn::kProducts, k, value(v));
    ASSERT_EQ(c.commit(), sn::Outcome::kCommitted);
  }

  static inline int generation_ = 0;
  sn::WorkloadOptions w_;
  sn::Layout layout_;
  std::vector<sluice::MemoryRegion> regions_;
  std::unique_ptr<sn::RsiClient> writer_, reader_;
};

// The writer commits 20 times on the records the reader reads, in the
// middle of the reader's transaction: every commit's begin() sees the
// previous one (read-your-writes), no one is recovered, and the reader still
// reads its snapshot (from the overflow area) and commits.
TEST_F(RsiReadOnlyTest, ALongReadOnlyReaderHoldsNoWriterBack) {
  const std::vector<std::byte> five = loaded(5), seven = loaded(7);
  reader_->begin_read_only();
  EXPECT_TRUE(reader_->parked());
  std::vector<std::byte> got(32);
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, five);
  const uint64_t reader_rts = reader_->read_timestamp();
  for (uint8_t i = 1; i <= 20; ++i) {
    write_all(*writer_, {5, 7}, i);
    // The next snapshot includes this commit (its timestamp 2i - 1 lies
    // above the reader's parked 2, 4, ...).
    writer_->begin_read_only();
    EXPECT_GE(writer_->read_timestamp(), 2u * i - 1) << "commit " << int(i);
    ASSERT_TRUE(writer_->read(sn::kProducts, 7, got));
    EXPECT_EQ(got, value(i));
    ASSERT_EQ(writer_->commit(), sn::Outcome::kCommitted);
  }
  EXPECT_EQ(writer_->stats().clients_recovered, 0u);
  EXPECT_EQ(writer_->stats().commits, 20u);
  // The reader's snapshot did not move; both products come back as loaded.
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, five);
  ASSERT_TRUE(reader_->read(sn::kProducts, 7, got));
  EXPECT_EQ(got, seven);
  EXPECT_EQ(reader_->read_timestamp(), reader_rts);
  EXPECT_THROW(reader_->write(sn::kProducts, 5, value(1)), sn::NamError)
      << "a read-only transaction does not write";
  EXPECT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  EXPECT_EQ(reader_->stats().read_only, 1u);

  // The reader now writes: it unparks, gives up every own timestamp the
  // writer passed (2, 4, ..., 38: all below the writer's last commit, 39),
  // and its commit lands after all of the writer's.
  reader_->begin();
  EXPECT_FALSE(reader_->parked());
  EXPECT_GE(reader_->stats().burned, 19u);
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, value(20)) << "the new snapshot sees every commit of the writer";
  reader_->write(sn::kProducts, 5, value(0x77));
  ASSERT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  writer_->begin();
  ASSERT_TRUE(writer_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, value(0x77));
  writer_->write(sn::kProducts, 5, value(0x78));
  EXPECT_EQ(writer_->commit(), sn::Outcome::kCommitted);
  EXPECT_EQ(writer_->stats().clients_recovered, 0u);
  writer_->retire();
  reader_->retire();
}

// The contrast: the same long reader started with begin() holds its
// timestamp 2 pending. The writer's commit at 1 is visible (below 2), but
// after its commit at 3 its next begin() waits for 3 to become visible,
// which it cannot before 2 is done: after 200 ms recovery presumes the
// reader dead, and the reader learns it was fenced.
TEST_F(RsiReadOnlyTest, APlainBeginHoldsTheWriterBackUntilRecoveryTakesTheReader) {
  reader_->begin();
  std::vector<std::byte> got(32);
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  write_all(*writer_, {5}, 1);
  write_all(*writer_, {5}, 2);
  writer_->begin();  // returns only after recovering the reader
  EXPECT_EQ(writer_->stats().clients_recovered, 1u);
  EXPECT_EQ(writer_->commit(), sn::Outcome::kCommitted);
  reader_->read(sn::kProducts, 5, got);
  reader_->commit();  // read-only: nothing to validate
  EXPECT_THROW(reader_->begin(), sn::NamError) << "the reader was fenced";
}

// Two parked readers and a writer: the writer passes both readers'
// timestamps; one reader unparks and writes, the other stays parked; every
// snapshot afterwards sees both writes, and a read-only snapshot taken by
// the parked reader does too.
TEST_F(RsiReadOnlyTest, ParkedClientsUnparkOneAtATime) {
  std::vector<std::byte> got(32);
  reader_->begin_read_only();
  ASSERT_TRUE(reader_->read(sn::kProducts, 3, got));
  ASSERT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  for (uint8_t i = 1; i <= 5; ++i) write_all(*writer_, {3}, i);
  // Still parked between read-only transactions: a new one sees them all.
  reader_->begin_read_only();
  ASSERT_TRUE(reader_->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(5));
  ASSERT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  write_all(*reader_, {3}, 0x40);  // unparks
  write_all(*writer_, {3}, 0x41);
  reader_->begin_read_only();
  ASSERT_TRUE(reader_->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0x41));
  ASSERT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  EXPECT_EQ(writer_->stats().clients_recovered + reader_->stats().clients_recovered, 0u);
  reader_->retire();  // parked: the retire word takes over
  write_all(*writer_, {3}, 0x42);
  writer_->begin_read_only();
  ASSERT_TRUE(writer_->read(sn::kProducts, 3, got));
  EXPECT_EQ(got, value(0x42));
  ASSERT_EQ(writer_->commit(), sn::Outcome::kCommitted);
  writer_->retire();
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
