#include "wal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

namespace kv {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw sluice::Error(sluice::ErrorCode::kResource,
                      "sluice-kv: " + what + " " + path + ": " + std::strerror(errno));
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) io_error("cannot write", path);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

bool all_zero(const std::string& bytes, size_t from) {
  for (size_t i = from; i < bytes.size(); ++i)
    if (bytes[i] != 0) return false;
  return true;
}

const char* kind_name(RecordFileKind k) {
  return k == RecordFileKind::kLog ? "write-ahead log" : "snapshot";
}

}  // namespace

const char* fsync_mode_name(FsyncMode mode) {
  switch (mode) {
    case FsyncMode::kAlways:
      return "always";
    case FsyncMode::kEverySec:
      return "everysec";
    case FsyncMode::kNo:
      return "no";
  }
  return "?";
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string encode_header(const RecordFileHeader& h) {
  std::string out(kRecordFileMagic, sizeof kRecordFileMagic);
  put_u32(out, static_cast<uint32_t>(h.kind));
  put_u32(out, h.replicas);
  put_u32(out, h.rank);
  put_u32(out, h.run);
  put_u32(out, 0);
  put_u32(out, crc32c(0, out.data(), out.size()));
  static_assert(sizeof kRecordFileMagic + 6 * 4 == kHeaderBytes);
  return out;
}

void append_record(std::string& out, std::string_view payload) {
  put_u32(out, static_cast<uint32_t>(payload.size()));
  put_u32(out, crc32c(0, payload.data(), payload.size()));
  out.append(payload);
}

RecordFile read_record_file(const std::string& path, RecordFileKind kind, uint32_t replicas,
                            uint32_t rank) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error("cannot open", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) io_error("cannot read", path);
  auto corrupt = [&](uint64_t offset, const std::string& what) {
    return RecordFileError("sluice-kv: " + path + " at offset " + std::to_string(offset) + ": " +
                           what + "; the file is not a whole sluice-kv " + kind_name(kind) +
                           " (move it away to start this replica from the others, or restore "
                           "it from a backup)");
  };
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kRecordFileMagic, sizeof kRecordFileMagic) != 0)
    throw corrupt(0, bytes.size() < kHeaderBytes
                         ? "shorter than a header (" + std::to_string(bytes.size()) + " bytes)"
                         : "not a sluice-kv data file (bad magic)");
  if (crc32c(0, bytes.data(), kHeaderBytes - 4) != load_u32(bytes.data() + kHeaderBytes - 4))
    throw corrupt(0, "the header's checksum does not match");
  RecordFile f;
  f.header.kind = static_cast<RecordFileKind>(load_u32(bytes.data() + 8));
  f.header.replicas = load_u32(bytes.data() + 12);
  f.header.rank = load_u32(bytes.data() + 16);
  f.header.run = load_u32(bytes.data() + 20);
  if (f.header.kind != kind)
    throw corrupt(8, std::string("a file of another kind where a ") + kind_name(kind) + " belongs");
  if (f.header.replicas != replicas)
    throw RecordFileError("sluice-kv: " + path + " belongs to a cluster of " +
                          std::to_string(f.header.replicas) + " replicas, and this job has " +
                          std::to_string(replicas) +
                          ": use the --replicas it was written with, or another --data-dir");
  if (f.header.rank != rank)
    throw corrupt(16, "written by replica " + std::to_string(f.header.rank) + ", not " +
                          std::to_string(rank));
  size_t at = kHeaderBytes;
  while (at < bytes.size()) {
    const size_t left = bytes.size() - at;
    if (left < kRecordHeaderBytes) break;  // torn: a header cut short
    const uint32_t length = load_u32(bytes.data() + at);
    const uint32_t crc = load_u32(bytes.data() + at + 4);
    if (length > left - kRecordHeaderBytes) {
      // Cut short by the end of the file: torn, unless it claims more than
      // any record holds and other bytes follow (a length smashed).
      if (length > kMaxRecordBytes && !all_zero(bytes, at + kRecordHeaderBytes))
        throw corrupt(at, "a record claims " + std::to_string(length) + " bytes");
      break;
    }
    const char* payload = bytes.data() + at + kRecordHeaderBytes;
    const size_t next = at + kRecordHeaderBytes + length;
    // (No record is empty: a zero length is a tail of zeros, or damage.)
    if (length == 0 || crc32c(0, payload, length) != crc) {
      // Torn: the last record half written, or zeros a crash left after it.
      if (all_zero(bytes, length == 0 ? at : next)) break;
      throw corrupt(at, length == 0 ? std::string("an empty record, and other bytes after it")
                                    : "a record's checksum does not match, and " +
                                          std::to_string(bytes.size() - next) + " bytes follow it");
    }
    f.records.emplace_back(payload, length);
    f.offsets.push_back(at);
    at += kRecordHeaderBytes + length;
  }
  f.good_bytes = at;
  (all_zero(bytes, at) ? f.zero_bytes : f.torn_bytes) = bytes.size() - at;
  return f;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open directory", dir);
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_error("cannot sync directory", dir);
  }
  ::close(fd);
}

void write_file_durably(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", tmp);
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fdatasync(fd) != 0) io_error("cannot sync", tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) io_error("cannot rename to " + path + ":", tmp);
  sync_directory(directory_of(path));
}

RecordWriter::RecordWriter(const std::string& path, uint64_t offset, RecordWriterOptions options)
    : path_(path), options_(options) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) io_error("cannot open", path);
  if (::ftruncate(fd_, static_cast<off_t>(offset)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    const int e = errno;
    close();
    errno = e;
    io_error("cannot truncate", path);
  }
  end_ = zeroed_ = offset;
}

RecordWriter::~RecordWriter() {
  try {
    if (fd_ >= 0) sync();
  } catch (const sluice::Error&) {
    // A destructor cannot say so; the records not synced are lost as in a crash.
  }
  close();
}

RecordWriter::RecordWriter(RecordWriter&& other) noexcept { *this = std::move(other); }

RecordWriter& RecordWriter::operator=(RecordWriter&& other) noexcept {
  if (this != &other) {
    try {
      if (fd_ >= 0) sync();
    } catch (const sluice::Error&) {
    }
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    options_ = other.options_;
    pending_ = std::move(other.pending_);
    other.pending_.clear();
    dirty_ = std::exchange(other.dirty_, false);
    end_ = other.end_;
    zeroed_ = other.zeroed_;
    last_sync_ms_ = other.last_sync_ms_;
    syncs_ = other.syncs_;
  }
  return *this;
}

void RecordWriter::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RecordWriter::write_pending() {
  if (pending_.empty()) return;
  if (options_.zeros_ahead != 0 && end_ + pending_.size() > zeroed_) {
    // The file grows here, once a zeros_ahead, not at every sync: zeros
    // from the end of these records (what they cover past the old zeros is
    // written once, by them) to zeros_ahead beyond.
    const uint64_t from = std::max(zeroed_, end_ + pending_.size());
    const uint64_t upto = end_ + pending_.size() + options_.zeros_ahead;
    static constexpr std::array<char, 64 * 1024> kZeros{};  // no buffer made per extension
    for (uint64_t at = from; at < upto;) {
      const ssize_t w = ::pwrite(fd_, kZeros.data(), std::min<uint64_t>(kZeros.size(), upto - at),
                                 static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) io_error("cannot write", path_);
      at += static_cast<uint64_t>(w);
    }
    if (::fdatasync(fd_) != 0) io_error("cannot sync", path_);
    zeroed_ = upto;
  }
  write_all(fd_, pending_.data(), pending_.size(), path_);
  end_ += pending_.size();
  pending_.clear();
  dirty_ = true;
}

void RecordWriter::sync() {
  write_pending();
  if (!dirty_) return;
  if (::fdatasync(fd_) != 0) io_error("cannot sync", path_);
  if (options_.sync_delay_us != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(options_.sync_delay_us));
  dirty_ = false;
  ++syncs_;
}

void RecordWriter::commit() {
  if (options_.fsync == FsyncMode::kAlways) return sync();
  if (!options_.hold_unsynced) write_pending();
}

void RecordWriter::tick(uint64_t now_ms) {
  if (options_.fsync != FsyncMode::kEverySec) return;
  if (last_sync_ms_ == 0) last_sync_ms_ = now_ms;
  if (now_ms - last_sync_ms_ < 1000) return;
  last_sync_ms_ = now_ms;
  if (unsynced()) sync();
}

}  // namespace kv
