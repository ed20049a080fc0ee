// RSI's overflow area with the clients' interleaving scripted step by step:
// a one-rank job (CTest starts it with `sluice run -n 1`) whose rank is the
// memory server and drives a long reader and a writer itself. Two versions
// per record: the writer's second commit overwrites the version the
// reader's snapshot sees. With an overflow area the writer first moves it
// there and the reader finds it, byte for byte the version it saw before;
// without one the reader aborts too-old; a version the ring has reused
// since is too-old again, never a wrong one.
#include <gtest/gtest.h>
#include <sluice/sluice.h>

#include <cstring>
#include <memory>
#include <vector>

#include "layout.h"
#include "rsi.h"
#include "workload.h"

namespace sn = sluice::nam;

namespace {

sluice::Cluster* g_cluster = nullptr;

class RsiOverflowTest : public ::testing::Test {
 protected:
  // Timestamps: the writer (client 0) owns 1, 3, 5, ...; the reader
  // (client 1) 2, 4, ... Its pending 2 holds every snapshot at most at 1, so
  // the writer's commits at 1 and 3 need no read-your-writes wait.
  void make(uint32_t overflow_entries) {
    w_.products = 16;
    w_.record_bytes = 32;
    layout_ = sn::make_layout(w_, 1, 2, 2, 4096);
    layout_.overflow_entries = overflow_entries;
    layout_.prefix.append("-ovf-").append(std::to_string(++generation_));
    for (uint32_t t = 0; t < layout_.tables.size(); ++t) {
      regions_.push_back(g_cluster->expose(layout_.region_name(layout_.tables[t].name),
                                           layout_.region_bytes(t, 0)));
      sn::load_table(layout_, w_, t, 0, regions_.back().data());
      if (overflow_entries != 0) {
        regions_.push_back(g_cluster->expose(layout_.overflow_name(layout_.tables[t].name),
                                             layout_.overflow_region_bytes(t)));
      }
    }
    regions_.push_back(g_cluster->expose(layout_.meta_name(), layout_.meta_bytes()));
    writer_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 0);
    reader_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 1);
  }

  // The loaded payload of a product, straight from this rank's region
  // (before any write: installs reuse its place).
  std::vector<std::byte> loaded(uint64_t key) const {
    const std::byte* slot = regions_.front().data() + layout_.slot_offset(sn::kProducts, key);
    const std::byte* v = slot + layout_.version_offset(sn::kProducts, 0) + 16;
    return std::vector<std::byte>(v, v + 32);
  }
  static std::vector<std::byte> value(uint8_t v) {
    return std::vector<std::byte>(32, std::byte{v});
  }

  // One writer transaction that overwrites `keys` with `v`.
  void write_all(const std::vector<uint64_t>& keys, uint8_t v) {
    writer_->begin();
    for (uint64_t k : keys) writer_->write(sn::kProducts, k, value(v));
    ASSERT_EQ(writer_->commit(), sn::Outcome::kCommitted);
  }

  static inline int generation_ = 0;
  sn::WorkloadOptions w_;
  sn::Layout layout_;
  std::vector<sluice::MemoryRegion> regions_;
  std::unique_ptr<sn::RsiClient> writer_, reader_;
};

TEST_F(RsiOverflowTest, ALongReaderFindsItsVersionInTheOverflowArea) {
  make(64);
  const std::vector<std::byte> five = loaded(5), seven = loaded(7);
  reader_->begin();
  ASSERT_EQ(reader_->read_timestamp(), 0u);
  std::vector<std::byte> got(32);
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, five);
  // Two commits on products 5 and 7: the second overwrites the loaded
  // versions (commit id 0), the ones the reader's snapshot sees.
  write_all({5, 7}, 0xa1);
  EXPECT_EQ(writer_->stats().overflow_moved, 0u) << "the first commit takes the free version";
  write_all({5, 7}, 0xa2);
  EXPECT_EQ(writer_->stats().overflow_moved, 2u) << "the reader's snapshot sees both versions";
  // The reader goes on: product 5 again (the same version as before) and
  // product 7 for the first time, both from the overflow area.
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  EXPECT_EQ(got, five);
  ASSERT_TRUE(reader_->read(sn::kProducts, 7, got));
  EXPECT_EQ(got, seven);
  EXPECT_EQ(reader_->stats().overflow_hits, 2u);
  EXPECT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  // A new snapshot sees the writer's last values, in the slot.
  reader_->begin();
  ASSERT_TRUE(reader_->read(sn::kProducts, 7, got));
  EXPECT_EQ(got, value(0xa2));
  EXPECT_EQ(reader_->commit(), sn::Outcome::kCommitted);
  EXPECT_EQ(reader_->stats().overflow_hits, 2u);
}

TEST_F(RsiOverflowTest, WithoutAnOverflowAreaTheLongReaderIsTooOld) {
  make(0);
  reader_->begin();
  std::vector<std::byte> got(32);
  ASSERT_TRUE(reader_->read(sn::kProducts, 5, got));
  write_all({5}, 0xa1);
  write_all({5}, 0xa2);
  reader_->read(sn::kProducts, 5, got);
  EXPECT_EQ(reader_->commit(), sn::Outcome::kTooOld);
  EXPECT_EQ(writer_->stats().overflow_moved, 0u);
}

TEST_F(RsiOverflowTest, AVersionNoSnapshotSeesIsNotMoved) {
  make(64);
  // The reader never began: no snapshot word is set.
  write_all({5}, 0xa1);
  write_all({5}, 0xa2);
  EXPECT_EQ(writer_->stats().overflow_moved, 0u);
}

// A ring of 2 entries and 3 versions moved: the first one's entry is reused
// by the third, so the reader's chain for product 5 is cut: too-old, not
// the other record's version.
TEST_F(RsiOverflowTest, AVersionTheRingReusedIsTooOldNeverWrong) {
  make(2);
  const std::vector<std::byte> nine = loaded(9);
  reader_->begin();
  write_all({5, 7, 9}, 0xa1);
  write_all({5, 7, 9}, 0xa2);
  EXPECT_EQ(writer_->stats().overflow_moved, 3u);
  std::vector<std::byte> got(32);
  ASSERT_TRUE(reader_->read(sn::kProducts, 9, got)) << "the newest entry is still there";
  EXPECT_EQ(got, nine);
  EXPECT_FALSE(reader_->read(sn::kProducts, 5, got)) << "its entry was reused";
  EXPECT_EQ(reader_->commit(), sn::Outcome::kTooOld);
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
