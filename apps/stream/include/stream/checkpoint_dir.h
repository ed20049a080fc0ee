// stream/checkpoint_dir.h: where the engine's checkpoints live, how their
// files are written durably, and which checkpoint a run restores (what a
// snapshot file holds: stream/checkpoint.h).
//
//   DIR/ckpt-<id>/worker-<g>.snap   worker g's state at checkpoint id
//   DIR/ckpt-<id>/done-<g>          worker g saw every worker's snapshot of
//                                   id written: id is complete
//   DIR/ckpt-<id>/savepoint         id is a savepoint (a job stopped there):
//                                   kept when newer checkpoints complete
//
// Checkpoint ids only grow in a directory: a run numbers its checkpoints
// after the largest id any rank's directory holds (complete or not), so a
// run never writes into a directory an earlier run left (a done marker of
// which would pass for its own).
//
// A snapshot is written to a temporary name, fsynced and renamed, so a file
// under its own name is whole. A done marker is written only after every
// worker announced its snapshot written, so one done marker of any worker,
// on any rank, proves that every worker's snapshot of that id exists: the
// ranks restore the largest id that any of them has a marker of.
//
// Errors throw std::runtime_error naming the file.
// Thread safety: free functions.
#pragma once

#include <fcntl.h>
#include <sluice/sluice.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::stream {

struct CheckpointOptions {
  std::string dir;          // empty: no checkpoints
  int64_t every_ms = 1000;  // a checkpoint this often (wall time), started by any worker
  bool restore = false;     // start from the latest complete checkpoint in dir, if any
  // Start from this checkpoint or savepoint (0: as `restore` says); it must
  // be complete (a done marker on some rank).
  uint64_t restore_from = 0;
  std::string fingerprint;  // what a restored checkpoint must have been taken by
  // Every this many checkpoints one is whole; the others hold only what
  // changed since the one before (1: every one whole).
  uint32_t full_every = 10;
  // Polled by every worker: once it returns true, the workers take a
  // savepoint (a checkpoint that every worker agrees is the last) and stop
  // there, their windows not fired (Report::savepoint). Unset: never.
  std::function<bool()> stop_with_savepoint;
};

namespace detail {

// An allocator of page-aligned memory whose elements start uninitialised
// (resize() does not zero what the caller is about to fill): a snapshot's
// file image, which write_durably writes with O_DIRECT, so that the kernel
// does not copy it into the page cache first.
template <class T>
struct PageAligned {
  using value_type = T;
  static constexpr size_t kPage = 4096;
  PageAligned() = default;
  template <class U>
  PageAligned(const PageAligned<U>&) noexcept {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kPage}));
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete (p, std::align_val_t{kPage}); }
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const PageAligned<U>&) const noexcept {
    return true;
  }
};
using SnapshotBytes = std::vector<char, PageAligned<char>>;

inline std::string checkpoint_path(const std::string& dir, uint64_t id) {
  return dir + "/ckpt-" + std::to_string(id);
}
inline std::string snapshot_path(const std::string& dir, uint64_t id, uint32_t worker) {
  return checkpoint_path(dir, id) + "/worker-" + std::to_string(worker) + ".snap";
}
inline std::string done_path(const std::string& dir, uint64_t id, uint32_t worker) {
  return checkpoint_path(dir, id) + "/done-" + std::to_string(worker);
}
inline std::string savepoint_path(const std::string& dir, uint64_t id) {
  return checkpoint_path(dir, id) + "/savepoint";
}

// The id of a `ckpt-<id>` directory entry's name; nullopt for any other name.
inline std::optional<uint64_t> checkpoint_id(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0 || name.size() == 5 || name.size() > 24) return std::nullopt;
  uint64_t id = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    id = id * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return id;
}

// Writes `bytes` to `path` whole or not at all: a temporary file, fsync,
// rename, fsync of the directory.
inline void write_durably(const std::string& path, std::span<const char> bytes) {
  const std::filesystem::path p(path);
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp";
  // Bytes at a page-aligned address go with O_DIRECT, whole pages of them
  // (the kernel copies nothing into the page cache: a snapshot is written
  // once and read back only after a failure); the tail, and everything on
  // a file system without O_DIRECT (tmpfs), through the page cache.
  constexpr size_t kPage = PageAligned<char>::kPage;
  const bool aligned = reinterpret_cast<uintptr_t>(bytes.data()) % kPage == 0;
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = aligned && bytes.size() >= kPage ? ::open(tmp.c_str(), flags | O_DIRECT, 0644) : -1;
  bool direct = fd >= 0;
  if (!direct) fd = ::open(tmp.c_str(), flags, 0644);
  if (fd < 0) throw std::runtime_error("cannot create the checkpoint file " + tmp);
  const auto buffered = [&] {  // from here on, through the page cache
    direct = false;
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0) {
      ::close(fd);
      throw std::runtime_error("cannot write the checkpoint file " + tmp);
    }
  };
  size_t done = 0;
  while (done < bytes.size()) {
    size_t want = bytes.size() - done;
    if (direct && want < kPage) {
      buffered();  // the tail
      continue;
    }
    if (direct) want = want / kPage * kPage;
    const ssize_t n = ::write(fd, bytes.data() + done, want);
    if (n < 0 && errno == EINVAL && direct) {
      buffered();  // O_DIRECT taken at open but refused for this write
      continue;
    }
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

// Creates the empty file `path` durably (its directory synced). Any number
// of processes may create the same one at once (ranks on one host share
// the checkpoint directory).
inline void create_marker(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  ::close(fd);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Whether any of workers [first, first + count) has a done marker of
// checkpoint `id` in `dir`.
inline bool is_done(const std::string& dir, uint64_t id, uint32_t first, uint32_t count) {
  std::error_code ec;
  for (uint32_t w = first; w < first + count; ++w) {
    if (std::filesystem::exists(done_path(dir, id, w), ec)) return true;
  }
  return false;
}

// The largest checkpoint id in `dir` with a done marker of any of workers
// [first, first + count); 0 if none.
inline uint64_t latest_done(const std::string& dir, uint32_t first, uint32_t count) {
  uint64_t best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::optional<uint64_t> id = checkpoint_id(e.path().filename().string());
    if (!id || *id <= best) continue;
    if (is_done(dir, *id, first, count)) best = *id;
  }
  return best;
}

// The largest checkpoint id in `dir`, complete or not; 0 if none.
inline uint64_t largest_id(const std::string& dir) {
  uint64_t best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (const std::optional<uint64_t> id = checkpoint_id(e.path().filename().string()))
      best = std::max(best, *id);
  }
  return best;
}

// Removes the checkpoints of `dir` older than `keep` (their ids are
// smaller), keeping `keep` itself and every savepoint.
inline void remove_older(const std::string& dir, uint64_t keep) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::optional<uint64_t> id = checkpoint_id(e.path().filename().string());
    if (id && *id < keep && !std::filesystem::exists(savepoint_path(dir, *id), ec))
      std::filesystem::remove_all(e.path(), ec);
  }
}

// Where a run's checkpoints start (every rank calls choose_checkpoint
// with the same options, and all get the same answer): the checkpoint to
// restore (0: none) and the largest id that any rank's directory holds, which
// new checkpoints are numbered after.
struct CheckpointStart {
  uint64_t restore_id = 0;
  uint64_t first_id = 0;
};

// The checkpoint to restore: the largest that any member has a done marker
// of (one marker proves every worker's snapshot was written) when
// `opt.restore`, or opt.restore_from if some member has a marker of it
// (std::runtime_error naming it if none has). One allgather named `name`
// among the members of `view` (this rank's workers are `first`..`first +
// threads`), bounded by the setup timeout: a member that never comes (it
// took another branch after a failure) fails it with its name, not a hang.
// nullopt if the view changed before every member called (the run is then
// given up: the command decides what the new view does). No checkpoint
// directory: {0, 0} without asking the others.
inline std::optional<CheckpointStart> choose_checkpoint(Cluster& cluster, const View& view,
                                                        const CheckpointOptions& opt,
                                                        const std::string& name, uint32_t first,
                                                        uint32_t threads) {
  CheckpointStart out;
  if (opt.dir.empty()) return out;
  const uint64_t from = opt.restore_from;
  const std::string mine = std::to_string(opt.restore ? latest_done(opt.dir, first, threads) : 0) +
                           " " + std::to_string(largest_id(opt.dir)) + " " +
                           (from != 0 && is_done(opt.dir, from, first, threads) ? "1" : "0");
  Result<Gathered> all =
      cluster.allgather(view, name, mine, Clock::now() + cluster.options().setup_timeout);
  if (!all) return std::nullopt;
  bool found = false;
  for (const std::string& v : all->values) {
    uint64_t done = 0, largest = 0;
    int has = 0;
    if (std::sscanf(v.c_str(), "%" SCNu64 " %" SCNu64 " %d", &done, &largest, &has) != 3)
      throw std::runtime_error("a rank sent '" + v + "' for the checkpoint to restore");
    out.restore_id = std::max(out.restore_id, done);
    out.first_id = std::max(out.first_id, largest);
    found |= has != 0;
  }
  if (from != 0) {
    if (!found) {
      throw std::runtime_error("checkpoint " + std::to_string(from) + " in " + opt.dir +
                               " is not complete on any rank (or does not exist)");
    }
    out.restore_id = from;
  }
  return out;
}

}  // namespace detail

}  // namespace sluice::stream
