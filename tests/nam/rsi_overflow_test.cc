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
  void make(uint32_t overflow_entries, uint32_t clients = 2) {
    w_.products = 16;
    w_.record_bytes = 32;
    layout_ = sn::make_layout(w_, 1, clients, 2, 4096);
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
    if (clients > 2) late_ = std::make_unique<sn::RsiClient>(*g_cluster, layout_, 2);
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
  std::unique_ptr<sn::RsiClient> writer_, reader_, late_;
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

// The gap check. Three clients, read-only readers (parked, so the writer
// commits as often as it likes): the writer (client 0) owns timestamps
// 1, 4, 7, the reader (client 1) begins at 0, the late reader (client 2)
// after the writer's commit at 1, at 1. The writer's commit at 4 moves the
// loaded version (the reader's) into the area, valid until 1; its commit at
// 7 overwrites version 1, the late reader's. With the late reader's
// snapshot word hidden from the writer (as when a snapshot is published
// just after a writer read the words), version 1 is not moved: the late
// reader walks the chain, finds the loaded version, whose interval [0, 1)
// ends at or below its read timestamp 1 (a gap), and must be too-old, not
// take the loaded version. Published, version 1 is moved and read.
class RsiOverflowGapTest : public RsiOverflowTest {
 protected:
  void run(bool hide_late_snapshot) {
    make(64, 3);
    const std::vector<std::byte> five = loaded(5);
    reader_->begin_read_only();
    ASSERT_EQ(reader_->read_timestamp(), 0u);
    write_all({5}, 0xa1);  // timestamp 1, into the free version
    late_->begin_read_only();
    ASSERT_EQ(late_->read_timestamp(), 1u);
    if (hide_late_snapshot) {
      std::byte* word = regions_.back().data() + layout_.snapshot_offset(2);
      std::memset(word, 0, 8);
    }
    write_all({5}, 0xa2);  // 4: moves the loaded version, the reader's
    EXPECT_EQ(writer_->stats().overflow_moved, 1u);
    write_all({5}, 0xa3);  // 7: overwrites version 1, the late reader's
    EXPECT_EQ(writer_->stats().overflow_moved, hide_late_snapshot ? 1u : 2u);
    std::vector<std::byte> got(32);
    ASSERT_TRUE(reader_->read(sn::kProducts, 5, got)) << "the loaded version is the reader's";
    EXPECT_EQ(got, five);
    EXPECT_EQ(reader_->commit(), sn::Outcome::kCommitted);
    if (hide_late_snapshot) {
      std::vector<std::byte> untouched = value(0xee);
      EXPECT_FALSE(late_->read(sn::kProducts, 5, untouched))
          << "the late reader must not get the loaded version (read timestamp 1 is past its "
             "interval [0, 1))";
      EXPECT_EQ(untouched, value(0xee)) << "nothing is copied out of a gap";
      EXPECT_EQ(late_->commit(), sn::Outcome::kTooOld);
    } else {
      ASSERT_TRUE(late_->read(sn::kProducts, 5, got));
      EXPECT_EQ(got, value(0xa1));
      EXPECT_EQ(late_->commit(), sn::Outcome::kCommitted);
    }
    EXPECT_EQ(writer_->stats().clients_recovered, 0u);
  }
};

TEST_F(RsiOverflowGapTest, AVersionOverwrittenWithoutAMoveLeavesAGapThatIsTooOld) { run(true); }

TEST_F(RsiOverflowGapTest, PublishedTheSameSnapshotGetsItsVersionMoved) { run(false); }

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sluice::Cluster cluster = sluice::Cluster::join();
  g_cluster = &cluster;
  const int code = RUN_ALL_TESTS();
  g_cluster = nullptr;
  return code;
}
