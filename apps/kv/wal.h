// apps/kv/wal.h: the record files a replica keeps under --data-dir (its
// write-ahead log and its snapshot, replica_disk.h): a header, then records,
// each with its length and a checksum, appended and synced as
// --fsync says.
//
// Layout (little-endian, no padding):
//
//   header, kHeaderBytes = 32:
//    0          8         12         16         20         24         28       32
//    +----------+----------+----------+----------+----------+----------+--------+
//    | magic    | kind u32 | replicas | rank u32 | run u32  | zero u32 | crc32c |
//    | SLKVLOG1 |          | u32      |          |          |          | of 0-27|
//    +----------+----------+----------+----------+----------+----------+--------+
//   then records, each:
//    0            4              8
//    +------------+--------------+----------------+
//    | length u32 | crc32c u32   | payload        |
//    |            | of payload   | (length bytes) |
//    +------------+--------------+----------------+
//
// Reading (read_record_file): a record cut short by the end of the file, or
// a bad record followed by nothing but zero bytes (what a crash in the middle
// of an append leaves), is a torn tail: it and what follows are dropped and
// the reader says where the good part ends. Zero bytes after the last record
// are the end too (the space a writer keeps ahead, or a crash's), counted
// apart. A bad record with anything
// else after it, a bad header, or a header of another kind, replica count
// or rank is corruption: a RecordFileError naming the file and the offset.
//
// Thread safety: none; a RecordWriter belongs to one thread.
#pragma once

#include <sluice/errors.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kv {

// Redis's appendfsync: when appended records reach the disk.
enum class FsyncMode : uint8_t {
  kAlways,    // written and fdatasync'ed before commit() returns
  kEverySec,  // written at commit(); fdatasync'ed by tick() at most a second later
  kNo,        // written at commit(); the kernel decides when they reach the disk
};
const char* fsync_mode_name(FsyncMode mode);

// CRC-32C (Castagnoli), continuing from `crc` (0 to begin).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kRecordHeaderBytes = 8;
inline constexpr char kRecordFileMagic[8] = {'S', 'L', 'K', 'V', 'L', 'O', 'G', '1'};
// No record is longer (a snapshot is one record).
inline constexpr uint32_t kMaxRecordBytes = uint32_t{1} << 31;

enum class RecordFileKind : uint32_t {
  kLog = 1,       // replica_disk.h: the write-ahead log
  kSnapshot = 2,  // replica_disk.h: one snapshot
};

struct RecordFileHeader {
  RecordFileKind kind = RecordFileKind::kLog;
  uint32_t replicas = 0;
  uint32_t rank = 0;
  uint32_t run = 0;  // replica_disk.h: how many runs started from these files
  friend bool operator==(const RecordFileHeader&, const RecordFileHeader&) = default;
};

// A file that is not what it should be (ErrorCode::kInvalidArgument); the
// message names the file, the offset and what was found.
class RecordFileError : public sluice::Error {
 public:
  explicit RecordFileError(const std::string& message)
      : sluice::Error(sluice::ErrorCode::kInvalidArgument, message) {}
};

struct RecordFile {
  RecordFileHeader header;
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;  // where each record begins in the file
  uint64_t good_bytes = 0;        // the header and the whole records
  uint64_t torn_bytes = 0;        // dropped after them (a torn tail); 0: none
  uint64_t zero_bytes = 0;        // else: the zero bytes after them (0: none)
};

// Reads `path`, whose header must have `kind` and `replicas` and `rank`
// (the run is what the file says). Throws RecordFileError (the file is
// corrupt, or of another kind or cluster) or sluice::Error (it cannot be read).
RecordFile read_record_file(const std::string& path, RecordFileKind kind, uint32_t replicas,
                            uint32_t rank);

// The header's and a record's bytes.
std::string encode_header(const RecordFileHeader& h);
void append_record(std::string& out, std::string_view payload);

// Syncs directory `dir` (after a rename in it). Throws sluice::Error.
void sync_directory(const std::string& dir);
// Writes `bytes` to `path` whole and durably: a temporary file beside it,
// fdatasync, rename over `path`, then the directory synced. Throws
// sluice::Error.
void write_file_durably(const std::string& path, std::string_view bytes);

struct RecordWriterOptions {
  FsyncMode fsync = FsyncMode::kEverySec;
  // Test switch (sluice-kv's --test-wal-hold-unsynced): appended bytes stay in
  // this writer's memory until a sync writes and fdatasyncs them, so that a
  // SIGKILL loses exactly what was not synced, as a power cut would (a
  // killed process's written bytes survive in the page cache).
  bool hold_unsynced = false;
  // Test switch (--test-wal-sync-delay-us): every fdatasync takes this much
  // longer, as on a disk slower than this machine's (for benchmarks of
  // --fsync always).
  uint32_t sync_delay_us = 0;
  // Zero bytes the writer keeps written and synced past its records,
  // extending the file by this much when the records reach them (0: none).
  // A sync then flushes the records' data alone, not the file's new size
  // as well (with --fsync always: about a fifth less time per fdatasync on
  // this machine's ext4, three replicas syncing at once). A reader takes
  // the zeros for the end (RecordFile::zero_bytes).
  uint64_t zeros_ahead = 0;
};

// Appends records to an existing record file (its good part: the caller
// truncates a torn tail first, `good_bytes`). commit() ends a group of
// appends: it writes them (kAlways: and syncs them) in one write and one
// fdatasync, whatever their number.
class RecordWriter {
 public:
  RecordWriter() = default;
  // Opens `path` for appending at `offset`, truncating it there. Throws
  // sluice::Error.
  RecordWriter(const std::string& path, uint64_t offset, RecordWriterOptions options);
  ~RecordWriter();  // syncs what is left (a clean end), then closes
  RecordWriter(RecordWriter&& other) noexcept;
  RecordWriter& operator=(RecordWriter&& other) noexcept;
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  void append(std::string_view payload) { append_record(pending_, payload); }
  // Ends a group of appends (see the class comment). Throws sluice::Error.
  void commit();
  // kEverySec: syncs once a second has passed since the last sync and
  // something is unsynced. `now_ms`: any monotonic clock.
  void tick(uint64_t now_ms);
  // Writes and fdatasyncs everything appended. Throws sluice::Error.
  void sync();
  // Bytes appended and not yet written to the file, and written but not
  // yet synced.
  size_t unwritten() const { return pending_.size(); }
  bool unsynced() const { return dirty_ || !pending_.empty(); }
  uint64_t syncs() const { return syncs_; }

 private:
  void write_pending();
  void close();

  std::string path_;
  int fd_ = -1;
  RecordWriterOptions options_;
  std::string pending_;
  bool dirty_ = false;   // written since the last sync
  uint64_t end_ = 0;     // where the next write goes
  uint64_t zeroed_ = 0;  // zeros, written and synced, up to here (zeros_ahead)
  uint64_t last_sync_ms_ = 0;
  uint64_t syncs_ = 0;
};

}  // namespace kv
