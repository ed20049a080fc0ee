// The record files of --data-dir (wal.h): records read back as written, a
// torn tail dropped, damage in the middle refused with the file and offset
// named, and each --fsync mode syncing when it says it does.
#include "wal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kv {
namespace {

using sluice::testing::TempDir;

uint64_t file_size(const std::string& path) { return std::filesystem::file_size(path); }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

const RecordFileHeader kHeader{RecordFileKind::kLog, 3, 1, 7};

// A log with a header and no record yet, in `dir`.
std::string new_log(const TempDir& dir) {
  const std::string path = dir.path() + "/wal";
  write_all(path, encode_header(kHeader));
  return path;
}

// A log of `n` records ("record 0", "record 1", ...) written through a
// RecordWriter; returns where each record begins.
std::vector<uint64_t> write_log(const std::string& path, int n,
                                FsyncMode mode = FsyncMode::kAlways) {
  write_all(path, encode_header(kHeader));
  RecordWriter w(path, kHeaderBytes, RecordWriterOptions{mode, false});
  std::vector<uint64_t> at;
  uint64_t offset = kHeaderBytes;
  for (int i = 0; i < n; ++i) {
    const std::string r = "record " + std::to_string(i);
    at.push_back(offset);
    offset += kRecordHeaderBytes + r.size();
    w.append(r);
    w.commit();
  }
  return at;
}

TEST(Crc32cTest, MatchesTheCastagnoliCheckValue) {
  // The check value of CRC-32C over "123456789" (RFC 3720's polynomial).
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

TEST(RecordFileTest, ReadsBackEveryRecordAndTheHeader) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  write_log(path, 50);
  const RecordFile f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  EXPECT_EQ(f.header, kHeader);
  ASSERT_EQ(f.records.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(f.records[i], "record " + std::to_string(i));
  EXPECT_EQ(f.torn_bytes, 0u);
  EXPECT_EQ(f.good_bytes, file_size(path));
}

TEST(RecordFileTest, DropsALastRecordCutShortAndKeepsTheOthers) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  const std::vector<uint64_t> at = write_log(path, 10);
  // Every cut inside the last record (its header or its payload) is a torn tail.
  const std::string whole = read_all(path);
  for (uint64_t cut = at[9] + 1; cut < whole.size(); ++cut) {
    write_all(path, whole.substr(0, cut));
    const RecordFile f = read_record_file(path, RecordFileKind::kLog, 3, 1);
    ASSERT_EQ(f.records.size(), 9u) << "cut at " << cut;
    EXPECT_EQ(f.good_bytes, at[9]);
    EXPECT_EQ(f.torn_bytes, cut - at[9]);
  }
}

TEST(RecordFileTest, DropsALastRecordWrittenHalfAndZerosAfterIt) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  const std::vector<uint64_t> at = write_log(path, 10);
  std::string bytes = read_all(path);
  bytes[bytes.size() - 2] ^= 0x5a;  // the last record's payload half new, half old
  write_all(path, bytes + std::string(4096, '\0'));
  const RecordFile f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  EXPECT_EQ(f.records.size(), 9u);
  EXPECT_EQ(f.good_bytes, at[9]);
  EXPECT_EQ(f.torn_bytes, 4096u + (bytes.size() - at[9]));
  // Zeros alone after the records (a file extended, its data never written,
  // or a writer's zeros ahead): the end, not a torn record.
  write_all(path, read_all(path).substr(0, at[9]) + std::string(100, '\0'));
  const RecordFile z = read_record_file(path, RecordFileKind::kLog, 3, 1);
  EXPECT_EQ(z.records.size(), 9u);
  EXPECT_EQ(z.good_bytes, at[9]);
  EXPECT_EQ(z.zero_bytes, 100u);
  EXPECT_EQ(z.torn_bytes, 0u);
}

TEST(RecordFileTest, RefusesADamagedRecordInTheMiddleNamingTheFileAndOffset) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  const std::vector<uint64_t> at = write_log(path, 10);
  std::string bytes = read_all(path);
  bytes[at[4] + kRecordHeaderBytes + 1] ^= 0x01;
  write_all(path, bytes);
  try {
    read_record_file(path, RecordFileKind::kLog, 3, 1);
    FAIL() << "a damaged record in the middle was read";
  } catch (const RecordFileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("offset " + std::to_string(at[4])), std::string::npos) << what;
    EXPECT_NE(what.find("checksum"), std::string::npos) << what;
  }
}

TEST(RecordFileTest, RefusesAFileOfAnotherFormatKindOrCluster) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  write_all(path, "*1\r\n$4\r\nPING\r\n and more bytes than a header takes");
  EXPECT_THROW(read_record_file(path, RecordFileKind::kLog, 3, 1), RecordFileError);
  write_log(path, 2);
  EXPECT_THROW(read_record_file(path, RecordFileKind::kSnapshot, 3, 1), RecordFileError);
  EXPECT_THROW(read_record_file(path, RecordFileKind::kLog, 3, 2), RecordFileError);
  try {
    read_record_file(path, RecordFileKind::kLog, 5, 1);
    FAIL() << "a file of a 3-replica cluster was read for 5";
  } catch (const RecordFileError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster of 3 replicas"), std::string::npos) << e.what();
  }
  std::string bytes = read_all(path);
  bytes[13] ^= 0x01;  // the header's checksum no longer matches
  write_all(path, bytes);
  EXPECT_THROW(read_record_file(path, RecordFileKind::kLog, 3, 1), RecordFileError);
}

TEST(RecordWriterTest, AlwaysSyncsAtEveryCommit) {
  TempDir dir("sluice-kv-wal");
  const std::string path = new_log(dir);
  RecordWriter w(path, kHeaderBytes, RecordWriterOptions{FsyncMode::kAlways, true});
  w.append("one");
  w.append("two");
  EXPECT_TRUE(w.unsynced());
  w.commit();  // one group, one sync, even while holding unsynced bytes
  EXPECT_FALSE(w.unsynced());
  EXPECT_EQ(w.syncs(), 1u);
  EXPECT_EQ(file_size(path), kHeaderBytes + 2 * kRecordHeaderBytes + 6);
}

TEST(RecordWriterTest, EverysecWritesAtCommitAndSyncsOnceASecond) {
  TempDir dir("sluice-kv-wal");
  const std::string path = new_log(dir);
  RecordWriter w(path, kHeaderBytes, RecordWriterOptions{FsyncMode::kEverySec, false});
  w.tick(5000);
  w.append("one");
  w.commit();
  EXPECT_EQ(file_size(path), kHeaderBytes + kRecordHeaderBytes + 3);  // written, not synced
  EXPECT_EQ(w.syncs(), 0u);
  w.tick(5999);
  EXPECT_EQ(w.syncs(), 0u);
  w.tick(6000);
  EXPECT_EQ(w.syncs(), 1u);
  EXPECT_FALSE(w.unsynced());
  w.tick(7500);  // nothing new: nothing to sync
  EXPECT_EQ(w.syncs(), 1u);
}

TEST(RecordWriterTest, NoLeavesSyncingToTheKernelUntilTheEnd) {
  TempDir dir("sluice-kv-wal");
  const std::string path = new_log(dir);
  {
    RecordWriter w(path, kHeaderBytes, RecordWriterOptions{FsyncMode::kNo, false});
    w.append("one");
    w.commit();
    EXPECT_EQ(file_size(path), kHeaderBytes + kRecordHeaderBytes + 3);
    w.tick(1);
    w.tick(100000);
    EXPECT_EQ(w.syncs(), 0u);
    EXPECT_TRUE(w.unsynced());
  }  // a clean end syncs
  EXPECT_EQ(read_record_file(path, RecordFileKind::kLog, 3, 1).records.size(), 1u);
}

TEST(RecordWriterTest, HoldingUnsyncedBytesKeepsThemOutOfTheFileUntilASync) {
  // The crash test's hook: what was not synced is not in the file, so a
  // SIGKILL loses it.
  TempDir dir("sluice-kv-wal");
  const std::string path = new_log(dir);
  RecordWriter w(path, kHeaderBytes, RecordWriterOptions{FsyncMode::kEverySec, true});
  w.tick(1000);
  w.append("one");
  w.commit();
  EXPECT_EQ(file_size(path), kHeaderBytes);
  EXPECT_EQ(w.unwritten(), kRecordHeaderBytes + 3);
  w.tick(2000);
  EXPECT_EQ(file_size(path), kHeaderBytes + kRecordHeaderBytes + 3);
  EXPECT_EQ(w.unwritten(), 0u);
}

TEST(RecordWriterTest, TruncatesATornTailBeforeAppending) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/wal";
  write_log(path, 3);
  write_all(path, read_all(path) + std::string("\x07\x00\x00", 3));  // a record header cut short
  RecordFile f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  ASSERT_EQ(f.torn_bytes, 3u);
  {
    RecordWriter w(path, f.good_bytes, RecordWriterOptions{FsyncMode::kAlways, false});
    w.append("after");
    w.commit();
  }
  f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.records[3], "after");
  EXPECT_EQ(f.torn_bytes, 0u);
}

// zeros_ahead: the file grows by that much of synced zeros when the
// records reach its end, not at every sync; a reader stops at the zeros,
// and a writer opened again at the records' end cuts them off and goes on.
TEST(RecordWriterTest, KeepsZerosAheadOfItsRecordsAndTheReaderStopsThere) {
  TempDir dir("sluice-kv-wal");
  const std::string path = new_log(dir);
  const RecordWriterOptions o{FsyncMode::kAlways, false, 0, 4096};
  uint64_t end = kHeaderBytes;
  {
    RecordWriter w(path, kHeaderBytes, o);
    for (int i = 0; i < 3; ++i) {
      w.append("record " + std::to_string(i));
      w.commit();
      end += kRecordHeaderBytes + 8;
      EXPECT_EQ(file_size(path), kHeaderBytes + kRecordHeaderBytes + 8 + 4096)
          << "grown once, to zeros_ahead past the first record";
    }
    // A record past the zeros grows the file again, to zeros_ahead past it.
    w.append(std::string(5000, 'x'));
    w.commit();
    end += kRecordHeaderBytes + 5000;
    EXPECT_EQ(file_size(path), end + 4096);
  }
  RecordFile f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  ASSERT_EQ(f.records.size(), 4u);
  EXPECT_EQ(f.records[2], "record 2");
  EXPECT_EQ(f.records[3], std::string(5000, 'x'));
  EXPECT_EQ(f.good_bytes, end);
  EXPECT_EQ(f.torn_bytes, 0u);
  EXPECT_EQ(f.zero_bytes, file_size(path) - end);
  {
    RecordWriter w(path, f.good_bytes, o);
    w.append("after");
    w.commit();
  }
  f = read_record_file(path, RecordFileKind::kLog, 3, 1);
  ASSERT_EQ(f.records.size(), 5u);
  EXPECT_EQ(f.records[4], "after");
  EXPECT_EQ(f.torn_bytes, 0u);
}

TEST(WriteFileDurablyTest, ReplacesTheFileWholeAndLeavesNoTemporary) {
  TempDir dir("sluice-kv-wal");
  const std::string path = dir.path() + "/snapshot";
  write_file_durably(path, "first");
  write_file_durably(path, "second");
  EXPECT_EQ(read_all(path), "second");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace kv
