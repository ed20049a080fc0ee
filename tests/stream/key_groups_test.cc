// Key groups (stream/key_groups.h) and a snapshot's state filed by them
// (stream/checkpoint.h: put_state, decode_snapshot, read_state): every
// group has one owner and a worker's groups are one contiguous range; a
// restore of any range reads exactly the entries of its groups, so the
// ranges of any number of workers read each entry once; a damaged file is
// refused, naming it.
#include "stream/key_groups.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "stream/checkpoint.h"

namespace ss = sluice::stream;
namespace ssd = sluice::stream::detail;

namespace {

TEST(KeyGroupRangesTest, EveryGroupHasOneOwnerWhoseRangeHoldsIt) {
  for (const uint32_t groups : {1u, 7u, 128u, 1000u}) {
    for (uint32_t workers = 1; workers <= std::min(groups, 9u); ++workers) {
      const ss::KeyGroupRanges r(groups, workers);
      uint32_t next = 0;
      for (uint32_t w = 0; w < workers; ++w) {
        EXPECT_EQ(r.first(w), next) << groups << " groups, " << workers << " workers, worker " << w;
        EXPECT_LT(r.first(w), r.end(w)) << "worker " << w << " owns no group";
        for (uint32_t g = r.first(w); g < r.end(w); ++g)
          EXPECT_EQ(ss::KeyGroupRanges::owner_of_group(g, groups, workers), w);
        next = r.end(w);
      }
      EXPECT_EQ(next, groups);
    }
  }
  // A key's owner is its group's.
  const ss::KeyGroupRanges r(128, 3);
  for (uint64_t key = 0; key < 1000; ++key) {
    const uint64_t h = sluice::hash64(key);
    const uint32_t g = r.group_of(h);
    EXPECT_GE(g, r.first(r.owner(h)));
    EXPECT_LT(g, r.end(r.owner(h)));
  }
}

TEST(KeyGroupRangesTest, NoGroupsTooManyOrFewerThanWorkersAreRefused) {
  const auto message = [](uint32_t groups, uint32_t workers) {
    try {
      ss::KeyGroupRanges r(groups, workers);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(0, 1).find("--key-groups 0 is out of range"), std::string::npos);
  EXPECT_NE(message(ss::KeyGroupRanges::kMax + 1, 1).find("out of range"), std::string::npos);
  EXPECT_NE(message(4, 5).find("the job has 5 workers and 4 key groups"), std::string::npos);
  EXPECT_EQ(message(4, 4), "accepted");
}

struct Entry {
  uint64_t key;
  int64_t time;
  uint64_t value;
};

class SnapshotStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("key_groups_test_" + std::to_string(getpid()) + ".snap"))
                .string();
    for (uint64_t k = 0; k < 500; ++k) {
      for (int64_t t = 0; t < 1 + static_cast<int64_t>(k % 3); ++t)
        entries_.push_back(Entry{k * 7919, t * 1000, k + static_cast<uint64_t>(t)});
    }
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // The snapshot of worker 1 of 2 at checkpoint 4 with `entries_` filed in
  // `groups` groups.
  void write(uint32_t groups) {
    ssd::WorkerSnapshot s;
    s.id = 4;
    s.worker = 1;
    s.workers = 2;
    s.records_in = 12345;
    s.vc = {1, 2};
    s.next_epoch = {3, 4};
    s.position = "0:10,2:20";
    s.token = "tok";
    const auto bytes = ssd::encode_snapshot(
        "job", s, [&](ssd::SnapshotWriter& w) { ssd::put_state(w, groups, entries_); });
    ssd::write_durably(path_, bytes);
  }
  std::string error(uint32_t first, uint32_t end) {
    try {
      const ssd::SnapshotFile file(path_);
      ssd::StateIndex index;
      ssd::decode_snapshot(file, 4, "job", "dir", &index);
      ssd::read_state<Entry>(file, index, first, end);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "read";
  }
  static bool same(const Entry& a, const Entry& b) {
    return a.key == b.key && a.time == b.time && a.value == b.value;
  }

  std::string path_;
  std::vector<Entry> entries_;
};

TEST_F(SnapshotStateTest, TheRangesOfAnyNumberOfWorkersReadEachEntryOnce) {
  write(128);
  const ssd::SnapshotFile file(path_);
  ssd::StateIndex index;
  const ssd::WorkerSnapshot s = ssd::decode_snapshot(file, 4, "job", "dir", &index);
  EXPECT_EQ(s.records_in, 12345u);
  EXPECT_EQ(s.position, "0:10,2:20");
  EXPECT_EQ(s.token, "tok");
  EXPECT_EQ(index.groups(), 128u);
  for (const uint32_t workers : {1u, 2u, 3u, 5u}) {
    const ss::KeyGroupRanges r(128, workers);
    std::vector<Entry> all;
    for (uint32_t w = 0; w < workers; ++w) {
      const std::vector<Entry> mine = ssd::read_state<Entry>(file, index, r.first(w), r.end(w));
      for (const Entry& e : mine) EXPECT_EQ(r.owner(sluice::hash64(e.key)), w);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    ASSERT_EQ(all.size(), entries_.size()) << workers << " workers";
    // Each entry once, and one key's entries in the order they were put.
    for (const Entry& e : entries_) {
      EXPECT_EQ(std::count_if(all.begin(), all.end(), [&](const Entry& a) { return same(a, e); }),
                1);
    }
    for (size_t i = 1; i < all.size(); ++i) {
      if (all[i].key == all[i - 1].key) {
        EXPECT_LT(all[i - 1].time, all[i].time);
      }
    }
  }
  EXPECT_TRUE(ssd::read_state<Entry>(file, index, 128, 200).empty());
}

TEST_F(SnapshotStateTest, ADamagedOrForeignFileIsRefusedNamingIt) {
  write(16);
  EXPECT_EQ(error(0, 16), "read");
  // Another build's entries.
  {
    const ssd::SnapshotFile file(path_);
    ssd::StateIndex index;
    ssd::decode_snapshot(file, 4, "job", "dir", &index);
    try {
      struct KeyOnly {
        uint64_t key;
      };
      ssd::read_state<KeyOnly>(file, index, 0, 16);
      ADD_FAILURE() << "entries of another size were read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("holds state entries of 24 bytes, not 8"),
                std::string::npos)
          << e.what();
    }
  }
  const auto bytes = [&] {
    const ssd::SnapshotFile file(path_);
    return file.read(0, file.size());
  };
  std::vector<char> whole = bytes();
  // An entry's key changed: it is no longer of the group it is filed under.
  std::vector<char> moved = whole;
  moved[moved.size() - sizeof(Entry)] ^= 0x5a;
  ssd::write_durably(path_, moved);
  EXPECT_NE(
      error(0, 16).find(path_ + " is damaged: a state entry is filed under the wrong key group"),
      std::string::npos);
  // Cut short.
  std::vector<char> cut(whole.begin(), whole.end() - 5);
  ssd::write_durably(path_, cut);
  EXPECT_NE(error(0, 16).find(path_ + " is damaged: its state entries do not fill it"),
            std::string::npos)
      << error(0, 16);
  // A snapshot of the format before key groups.
  std::vector<char> older = whole;
  const uint64_t v2 = ssd::kSnapshotMagicV2;
  std::memcpy(older.data(), &v2, sizeof v2);
  ssd::write_durably(path_, older);
  EXPECT_NE(error(0, 16).find(path_ + " was written by an older sluice-stream (snapshot format 2"),
            std::string::npos)
      << error(0, 16);
  try {
    ssd::snapshot_workers(path_);
    ADD_FAILURE() << "an older format's worker count was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("older sluice-stream"), std::string::npos) << e.what();
  }
  // Another job's.
  ssd::write_durably(path_, whole);
  try {
    const ssd::SnapshotFile file(path_);
    ssd::StateIndex index;
    ssd::decode_snapshot(file, 4, "another job", "dir", &index);
    ADD_FAILURE() << "another job's snapshot was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("was taken by another job (job)"), std::string::npos);
  }
}

// An incremental checkpoint (checkpoint.h): worker 0's snapshots 1
// (whole), 2 (over 1) and 3 (over 2) read as one chain, oldest first, each
// later one's entries replacing what came before cell by cell, and the
// entries of a window the newest no longer holds left out of them all.
class SnapshotChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("chain_test_" + std::to_string(getpid())))
               .string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(uint64_t id, uint64_t base, std::vector<int64_t> windows,
             const std::vector<Entry>& entries, uint32_t worker = 0) {
    ssd::WorkerSnapshot s;
    s.id = id;
    s.worker = worker;
    s.workers = 2;
    s.records_in = id * 100;
    s.vc = {1, 2};
    s.next_epoch = {3, 4};
    s.base = base;
    s.windows = std::move(windows);
    ssd::write_durably(ssd::snapshot_path(dir_, id, worker),
                       ssd::encode_snapshot("job", s, [&](ssd::SnapshotWriter& w) {
                         ssd::put_state(w, 16, entries);
                       }));
  }
  // (key, time) -> value after reading checkpoint `id` as the engine
  // folds it: a replacing layer resets a cell at its first entry.
  std::map<std::pair<uint64_t, int64_t>, uint64_t> read(uint64_t id, std::vector<bool>* replaces) {
    std::map<std::pair<uint64_t, int64_t>, uint64_t> state;
    uint64_t n = 0;
    const ssd::WorkerSnapshot s = ssd::read_chain<Entry>(
        dir_, id, 0, "job", 16, 0, 16,
        [&](std::span<const Entry> entries, bool replace) {
          replaces->push_back(replace);
          const Entry* prev = nullptr;
          for (const Entry& e : entries) {
            uint64_t& v = state[{e.key, e.time}];
            if (replace && (prev == nullptr || prev->key != e.key || prev->time != e.time)) v = 0;
            v += e.value;
            prev = &e;
          }
        },
        &n);
    EXPECT_EQ(s.id, id);
    EXPECT_EQ(s.records_in, id * 100);
    return state;
  }
  std::string error(uint64_t id) {
    try {
      std::vector<bool> replaces;
      read(id, &replaces);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "read";
  }

  std::string dir_;
};

TEST_F(SnapshotChainTest, LaterSnapshotsReplaceCellsAndDroppedWindowsStayDropped) {
  // Whole: keys 1 and 2 in windows 0 and 1000, key 1 with two elements.
  write(1, 0, {}, {{1, 0, 5}, {1, 0, 6}, {2, 0, 7}, {1, 1000, 1}, {2, 1000, 2}});
  // Key 1's cell in window 1000 changed (now 10 + 20), window 2000 opened.
  write(2, 1, {0, 1000, 2000}, {{1, 1000, 10}, {1, 1000, 20}, {3, 2000, 4}});
  // Window 0 dropped (fired), key 3's cell in 2000 changed.
  write(3, 2, {1000, 2000}, {{3, 2000, 9}});
  std::vector<bool> replaces;
  const auto state = read(3, &replaces);
  EXPECT_EQ(replaces, (std::vector<bool>{false, true, true}));
  const std::map<std::pair<uint64_t, int64_t>, uint64_t> expected = {
      {{1, 1000}, 30}, {{2, 1000}, 2}, {{3, 2000}, 9}};
  EXPECT_EQ(state, expected);
  // Checkpoint 2 read on its own: window 0 is still there.
  replaces.clear();
  const auto at2 = read(2, &replaces);
  EXPECT_EQ(replaces, (std::vector<bool>{false, true}));
  EXPECT_EQ(at2.at({1, 0}), 11u);
  EXPECT_EQ(at2.at({1, 1000}), 30u);
}

TEST_F(SnapshotChainTest, AMissingOrForeignSnapshotInTheChainIsRefusedNamingIt) {
  write(1, 0, {}, {{1, 0, 5}});
  write(2, 1, {0}, {{1, 0, 6}});
  write(3, 2, {0}, {{1, 0, 7}});
  EXPECT_EQ(error(3), "read");
  std::filesystem::remove(ssd::snapshot_path(dir_, 2, 0));
  EXPECT_NE(error(3).find("cannot open the checkpoint file " + ssd::snapshot_path(dir_, 2, 0)),
            std::string::npos)
      << error(3);
  // A base that is another worker's.
  write(2, 1, {0}, {{1, 0, 6}}, 1);
  std::filesystem::rename(ssd::snapshot_path(dir_, 2, 1), ssd::snapshot_path(dir_, 2, 0));
  EXPECT_NE(error(3).find(ssd::snapshot_path(dir_, 2, 0) + " holds worker 1 of 2"),
            std::string::npos)
      << error(3);
  // A base that is not older.
  write(4, 4, {0}, {{1, 0, 6}});
  EXPECT_NE(error(4).find("is damaged: it builds on a later snapshot"), std::string::npos)
      << error(4);
}

}  // namespace

// write_durably (checkpoint.h) writes a page-aligned image's whole pages
// with O_DIRECT and the rest through the page cache: whatever the size and
// alignment, and on disk or tmpfs, the file holds exactly the bytes given.
TEST(WriteDurablyTest, AnyImageSizeAndAlignmentIsWrittenByteForByte) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("durable_test_" + std::to_string(getpid())))
          .string();
  const std::string shm = "/dev/shm/durable_test_" + std::to_string(getpid());
  constexpr size_t kPage = ssd::PageAligned<char>::kPage;
  for (const std::string& at : {dir, shm}) {
    for (const size_t size : {size_t{0}, size_t{5}, kPage - 1, kPage, 3 * kPage + 5, 64 * kPage}) {
      ssd::SnapshotBytes aligned(size);  // uninitialised: filled below
      std::vector<char> plain(size + 1);
      for (size_t i = 0; i < size; ++i) aligned[i] = plain[i + 1] = static_cast<char>(i * 7 + 1);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(aligned.data()) % kPage, 0u);
      const std::span<const char> want(aligned.data(), size);
      const std::span<const char> unaligned(plain.data() + 1, size);
      for (const std::span<const char> image : {want, unaligned}) {
        const std::string path = at + "/snap-" + std::to_string(size);
        ssd::write_durably(path, image);
        const ssd::SnapshotFile file(path);
        ASSERT_EQ(file.size(), size) << path;
        const std::vector<char> back = file.read(0, size);
        EXPECT_TRUE(std::equal(back.begin(), back.end(), want.begin())) << path;
        EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << path;
      }
    }
    std::filesystem::remove_all(at);
  }
}
