// stream/checkpoint.h: where the engine's checkpoints live and how a
// worker's snapshot is written and read back.
//
//   DIR/ckpt-<id>/worker-<g>.snap   worker g's state at checkpoint id
//   DIR/ckpt-<id>/done-<g>          worker g saw every worker's snapshot of
//                                   id written: id is complete
//
// A snapshot is written to a temporary name, fsynced and renamed, so a file
// under its own name is whole. A done marker is written only after every
// worker announced its snapshot written, so one done marker of any worker,
// on any rank, proves that every worker's snapshot of that id exists: the
// ranks restore the largest id that any of them has a marker of.
//
// The snapshot's bytes: a header (magic, format, the job's fingerprint: the
// query, strategy, worker count and options that change results, so that
// a checkpoint is never restored into another job), then fields in the
// order the engine writes them (SnapshotWriter / SnapshotReader: plain
// values, strings and vectors of trivially copyable values, native byte
// order: the same build writes and reads).
//
// Errors throw std::runtime_error naming the file.
// Thread safety: free functions; a writer or reader belongs to one thread.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice::stream {

struct CheckpointOptions {
  std::string dir;          // empty: no checkpoints
  int64_t every_ms = 1000;  // a checkpoint this often (wall time), started by any worker
  bool restore = false;     // start from the latest complete checkpoint in dir, if any
  std::string fingerprint;  // what a restored checkpoint must have been taken by
};

namespace detail {

inline constexpr uint64_t kSnapshotMagic = 0x32544e5043534c53ULL;  // "SLSCPNT2"

class SnapshotWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const char*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
};

class SnapshotReader {
 public:
  SnapshotReader(std::vector<char> bytes, std::string path)
      : bytes_(std::move(bytes)), path_(std::move(path)) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    need(n);
    std::string s(bytes_.data() + at_, n);
    at_ += n;
    return s;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / std::max<size_t>(1, sizeof(T))) need(n * sizeof(T));
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), bytes_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return v;
  }
  bool at_end() const { return at_ == bytes_.size(); }
  const std::string& path() const { return path_; }

 private:
  void need(uint64_t n) const {
    if (n > bytes_.size() - at_)
      throw std::runtime_error("checkpoint file " + path_ + " is cut short");
  }
  std::vector<char> bytes_;
  std::string path_;
  size_t at_ = 0;
};

inline std::string checkpoint_path(const std::string& dir, uint64_t id) {
  return dir + "/ckpt-" + std::to_string(id);
}
inline std::string snapshot_path(const std::string& dir, uint64_t id, uint32_t worker) {
  return checkpoint_path(dir, id) + "/worker-" + std::to_string(worker) + ".snap";
}
inline std::string done_path(const std::string& dir, uint64_t id, uint32_t worker) {
  return checkpoint_path(dir, id) + "/done-" + std::to_string(worker);
}

// Writes `bytes` to `path` whole or not at all: a temporary file, fsync,
// rename, fsync of the directory.
inline void write_durably(const std::string& path, const std::vector<char>& bytes) {
  const std::filesystem::path p(path);
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create the checkpoint file " + tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("cannot write the checkpoint file " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw std::runtime_error("cannot sync the checkpoint file " + tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename the checkpoint file " + tmp + " to " + path);
  const int dfd = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

inline std::vector<char> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open the checkpoint file " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The largest checkpoint id in `dir` with a done marker of any of workers
// [first, first + count); 0 if none.
inline uint64_t latest_done(const std::string& dir, uint32_t first, uint32_t count) {
  uint64_t best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    uint64_t id = 0;
    try {
      id = std::stoull(name.substr(5));
    } catch (const std::exception&) {
      continue;
    }
    if (id <= best) continue;
    for (uint32_t w = first; w < first + count; ++w) {
      if (std::filesystem::exists(done_path(dir, id, w), ec)) {
        best = id;
        break;
      }
    }
  }
  return best;
}

// Removes the checkpoints of `dir` older than `keep` (their ids are
// smaller), keeping `keep` itself.
inline void remove_older(const std::string& dir, uint64_t keep) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    try {
      if (std::stoull(name.substr(5)) < keep) std::filesystem::remove_all(e.path(), ec);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace detail

}  // namespace sluice::stream
