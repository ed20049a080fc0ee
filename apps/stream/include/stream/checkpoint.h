// stream/checkpoint.h: how a worker's snapshot is written and read back
// (where the checkpoints live, and which one a run restores:
// stream/checkpoint_dir.h).
//
// The snapshot's bytes: a header (magic and format, where the state
// section starts, the job's fingerprint: the query, strategy, key groups
// and options that change results, so that a checkpoint is never restored
// into another job), then fields in the order the engine writes them
// (SnapshotWriter / SnapshotReader: plain values, strings and vectors of
// trivially copyable values, native byte order: the same build writes and
// reads), then the operator's state filed by key group with an index
// (put_state), so that a job restored on another number of workers reads
// from each snapshot only the groups each worker owns now (read_state).
//
// A snapshot is whole, or incremental: it holds only the state entries
// changed since the same worker's previous snapshot, which it names as its
// base (its header's `base`), and the windows its state holds then; a
// restore reads the chain from the last whole snapshot up, each later
// snapshot's entries replacing the earlier ones', and drops what lies in
// windows the newest no longer holds (read_chain). Every
// CheckpointOptions::full_every-th checkpoint, the first after a start or
// a restore, and every savepoint are whole; once one completes, the
// checkpoints before the whole snapshot it builds on go (remove_older).
//
// Errors throw std::runtime_error naming the file.
// Thread safety: free functions; a writer or reader belongs to one thread.
#pragma once

#include <fcntl.h>
#include <sluice/sluice.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "stream/checkpoint_dir.h"
#include "stream/key_groups.h"
#include "stream/report.h"

namespace sluice::stream {

namespace detail {

inline constexpr uint64_t kSnapshotMagic = 0x34544e5043534c53ULL;  // "SLSCPNT4"
// Format 3, before incremental snapshots: read as whole ones.
inline constexpr uint64_t kSnapshotMagicV3 = 0x33544e5043534c53ULL;  // "SLSCPNT3"
// Format 2, before key groups: its state is not filed by group.
inline constexpr uint64_t kSnapshotMagicV2 = 0x32544e5043534c53ULL;  // "SLSCPNT2"

// The error for a file whose first 8 bytes are `magic` but not
// kSnapshotMagic.
inline std::runtime_error not_a_snapshot(const std::string& path, uint64_t magic) {
  if (magic == kSnapshotMagicV2) {
    return std::runtime_error(path +
                              " was written by an older sluice-stream (snapshot format 2, before "
                              "key groups); this one reads formats 3 and 4: start the job afresh");
  }
  return std::runtime_error(path + " is not a sluice-stream checkpoint");
}

class SnapshotWriter {
 public:
  SnapshotWriter() = default;
  // Writes into `buffer`, emptied first; its capacity is kept (a worker
  // hands each snapshot the buffer of the one before, so that taking a
  // snapshot faults in no fresh pages).
  explicit SnapshotWriter(SnapshotBytes buffer) : bytes_(std::move(buffer)) { bytes_.clear(); }

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
  // Writes n values at p as they are.
  template <class T>
  void put_raw(const T* p, size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* b = reinterpret_cast<const char*>(p);
    bytes_.insert(bytes_.end(), b, b + n * sizeof(T));
  }
  // Overwrites the value put at byte `at`.
  template <class T>
  void patch(size_t at, const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  // Appends n bytes for the caller to fill; returns where they start.
  char* grow(size_t n) {
    bytes_.resize(bytes_.size() + n);
    return bytes_.data() + bytes_.size() - n;
  }
  size_t size() const { return bytes_.size(); }
  // The bytes written, moved out (the writer is empty afterwards).
  SnapshotBytes take() { return std::move(bytes_); }

 private:
  SnapshotBytes bytes_;
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

// One worker's snapshot as the engine writes it (stream_worker.h): its
// counts, epoch and watermark state, its input's position and its sink's
// token; its operator's state follows them in the file, filed by key group
// (put_state, StateIndex).
struct WorkerSnapshot {
  uint64_t id = 0;
  uint32_t worker = 0, workers = 0;
  uint64_t records_in = 0, input_bytes = 0, rows = 0, checksum = 0, epochs = 0;
  std::vector<LateCount> late;
  uint64_t epoch = 0;
  int64_t max_seen = 0, published = 0, triggered = 0;
  std::vector<int64_t> vc;           // every worker's watermark, as last heard
  std::vector<uint64_t> next_epoch;  // per source: the epoch number due next
  std::vector<int64_t> lanes;        // per partition read (Kafka): its largest event time
  std::string position;              // the input's position ("": a count of records)
  std::string token;                 // the sink's (what its output had at the checkpoint)
  uint64_t base = 0;                 // incremental: the snapshot it builds on (0: whole)
  std::vector<int64_t> windows;      // incremental: the windows its state holds
};

// The bytes of `s` with `fingerprint` (the job's), then the operator's
// state section, which state(SnapshotWriter&) writes (put_state). The
// second field, patched in last, is the byte where that section starts.
// Written into `buffer` (its capacity reused, see SnapshotWriter).
template <class State>
SnapshotBytes encode_snapshot(const std::string& fingerprint, const WorkerSnapshot& s,
                              State&& state, SnapshotBytes buffer = {}) {
  SnapshotWriter w(std::move(buffer));
  w.put(kSnapshotMagic);
  w.put(uint64_t{0});  // the state section's byte offset, below
  w.put_string(fingerprint);
  w.put(s.id);
  w.put(s.worker);
  w.put(s.workers);
  w.put(s.records_in);
  w.put(s.input_bytes);
  w.put(s.rows);
  w.put(s.checksum);
  w.put(s.epochs);
  w.put_vector(s.late);
  w.put(s.epoch);
  w.put(s.max_seen);
  w.put(s.published);
  w.put(s.triggered);
  w.put_vector(s.vc);
  w.put_vector(s.next_epoch);
  w.put_vector(s.lanes);
  w.put_string(s.position);
  w.put_string(s.token);
  w.put(s.base);
  w.put_vector(s.windows);
  w.patch(sizeof(uint64_t), uint64_t{w.size()});
  state(w);
  return w.take();
}

// The state section: the operator's entries (trivially copyable, each with
// its `key`) filed by key group, so that a restore reads the groups it
// owns and nothing else:
//   u32 groups, u32 entry size, u64 first[groups + 1] (the index of each
//   group's first entry; first[groups] = the count), the entries.
template <class Entry>
void put_state(SnapshotWriter& w, uint32_t groups, const std::vector<Entry>& entries) {
  const auto group_of = [groups](const Entry& e) {
    return KeyGroupRanges::group_of(sluice::hash64(e.key), groups);
  };
  std::vector<uint64_t> first(size_t{groups} + 1, 0);
  for (const Entry& e : entries) ++first[group_of(e) + 1];
  for (uint32_t g = 0; g < groups; ++g) first[g + 1] += first[g];
  w.put(groups);
  w.put(static_cast<uint32_t>(sizeof(Entry)));
  w.put_raw(first.data(), first.size());
  // Each entry copied once, straight to its place (in the order put
  // within a group); its group hashed again rather than kept, so that
  // nothing the size of the state is allocated here.
  char* const at = w.grow(entries.size() * sizeof(Entry));
  std::vector<uint64_t> next(first.begin(), first.end() - 1);
  for (const Entry& e : entries)
    std::memcpy(at + next[group_of(e)]++ * sizeof(Entry), &e, sizeof(Entry));
}

// A snapshot file read in pieces (pread), so that a restore reads the
// header and the groups it owns, not the whole file.
class SnapshotFile {
 public:
  explicit SnapshotFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("cannot open the checkpoint file " + path_);
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) {
      ::close(fd_);
      throw std::runtime_error("cannot read the checkpoint file " + path_);
    }
    size_ = static_cast<uint64_t>(end);
  }
  ~SnapshotFile() { ::close(fd_); }
  SnapshotFile(const SnapshotFile&) = delete;
  SnapshotFile& operator=(const SnapshotFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Bytes [at, at + n); throws naming the file if it is shorter.
  std::vector<char> read(uint64_t at, uint64_t n) const {
    if (at > size_ || n > size_ - at)
      throw std::runtime_error("checkpoint file " + path_ + " is cut short");
    std::vector<char> out(n);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t k = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(at + done));
      if (k <= 0) throw std::runtime_error("cannot read the checkpoint file " + path_);
      done += static_cast<uint64_t>(k);
    }
    return out;
  }
  template <class T>
  T read_value(uint64_t at) const {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::vector<char> b = read(at, sizeof(T));
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Where a snapshot's state section is and how its groups are filed.
struct StateIndex {
  uint64_t entries_at = 0;  // byte offset of the first entry
  uint32_t entry_size = 0;
  std::vector<uint64_t> first;  // per group, its first entry's index; then the count
  uint32_t groups() const { return static_cast<uint32_t>(first.size() - 1); }
};

// The header of the snapshot in `file` (its bytes up to the state
// section): its format, where its state section starts, and a reader of
// the fields after those two.
struct SnapshotHeader {
  uint64_t magic;     // kSnapshotMagic or kSnapshotMagicV3
  uint64_t state_at;  // the state section's first byte
  SnapshotReader rest;
};
inline SnapshotHeader read_header(const SnapshotFile& file) {
  if (file.size() < 2 * sizeof(uint64_t)) throw not_a_snapshot(file.path(), 0);
  const auto magic = file.read_value<uint64_t>(0);
  if (magic != kSnapshotMagic && magic != kSnapshotMagicV3)
    throw not_a_snapshot(file.path(), magic);
  const auto state_at = file.read_value<uint64_t>(sizeof(uint64_t));
  SnapshotReader r(file.read(0, state_at), file.path());
  r.get<uint64_t>();
  r.get<uint64_t>();
  return {magic, state_at, std::move(r)};
}

// Reads checkpoint `id`'s snapshot header from `file` and its state
// section's index into `index`. Throws std::runtime_error naming the file
// if it is not one, is damaged, is of another checkpoint, or was taken by
// another job (another `fingerprint`; `dir` names where).
inline WorkerSnapshot decode_snapshot(const SnapshotFile& file, uint64_t id,
                                      const std::string& fingerprint, const std::string& dir,
                                      StateIndex* index) {
  const std::string& path = file.path();
  SnapshotHeader header = read_header(file);
  const uint64_t state_at = header.state_at;
  SnapshotReader& r = header.rest;
  const std::string theirs = r.get_string();
  if (theirs != fingerprint) {
    throw std::runtime_error("checkpoint " + std::to_string(id) + " in " + dir +
                             " was taken by another job (" + theirs + "), not by this one (" +
                             fingerprint + ")");
  }
  WorkerSnapshot s;
  s.id = r.get<uint64_t>();
  s.worker = r.get<uint32_t>();
  s.workers = r.get<uint32_t>();
  if (s.id != id || s.worker >= s.workers) {
    throw std::runtime_error(path + " holds worker " + std::to_string(s.worker) + " of " +
                             std::to_string(s.workers) + " at checkpoint " + std::to_string(s.id) +
                             ", not checkpoint " + std::to_string(id));
  }
  s.records_in = r.get<uint64_t>();
  s.input_bytes = r.get<uint64_t>();
  s.rows = r.get<uint64_t>();
  s.checksum = r.get<uint64_t>();
  s.epochs = r.get<uint64_t>();
  s.late = r.get_vector<LateCount>();
  s.epoch = r.get<uint64_t>();
  s.max_seen = r.get<int64_t>();
  s.published = r.get<int64_t>();
  s.triggered = r.get<int64_t>();
  s.vc = r.get_vector<int64_t>();
  s.next_epoch = r.get_vector<uint64_t>();
  s.lanes = r.get_vector<int64_t>();
  if (s.vc.size() != s.workers || s.next_epoch.size() != s.workers)
    throw std::runtime_error(path + " is damaged: its watermark vector has the wrong size");
  s.position = r.get_string();
  s.token = r.get_string();
  if (header.magic == kSnapshotMagic) {
    s.base = r.get<uint64_t>();
    s.windows = r.get_vector<int64_t>();
    if (s.base >= s.id)
      throw std::runtime_error(path + " is damaged: it builds on a later snapshot");
  }
  if (!r.at_end()) throw std::runtime_error(path + " is damaged: its header runs past its state");
  const auto groups = file.read_value<uint32_t>(state_at);
  index->entry_size = file.read_value<uint32_t>(state_at + sizeof(uint32_t));
  if (groups == 0 || groups > KeyGroupRanges::kMax || index->entry_size == 0)
    throw std::runtime_error(path + " is damaged: its state section's index is not one");
  const uint64_t first_at = state_at + 2 * sizeof(uint32_t);
  const std::vector<char> first = file.read(first_at, (uint64_t{groups} + 1) * sizeof(uint64_t));
  index->first.resize(size_t{groups} + 1);
  std::memcpy(index->first.data(), first.data(), first.size());
  index->entries_at = first_at + first.size();
  for (uint32_t g = 0; g < groups; ++g) {
    if (index->first[g] > index->first[g + 1])
      throw std::runtime_error(path + " is damaged: its key groups' index goes backwards");
  }
  const uint64_t count = index->first[groups];
  if (index->first[0] != 0 || count > (file.size() - index->entries_at) / index->entry_size ||
      index->entries_at + count * index->entry_size != file.size()) {
    throw std::runtime_error(path + " is damaged: its state entries do not fill it");
  }
  return s;
}

// The state entries of key groups [first, end) of the snapshot `index`
// describes: read from the file, those bytes alone. Every entry is checked
// to be of its group (a damaged file is refused, naming it).
template <class Entry>
std::vector<Entry> read_state(const SnapshotFile& file, const StateIndex& index, uint32_t first,
                              uint32_t end) {
  if (index.entry_size != sizeof(Entry)) {
    throw std::runtime_error(file.path() + " holds state entries of " +
                             std::to_string(index.entry_size) + " bytes, not " +
                             std::to_string(sizeof(Entry)) + " (another build of sluice-stream?)");
  }
  end = std::min(end, index.groups());
  if (first >= end) return {};
  const uint64_t from = index.first[first], to = index.first[end];
  std::vector<Entry> out(to - from);
  if (out.empty()) return out;
  const std::vector<char> bytes =
      file.read(index.entries_at + from * sizeof(Entry), (to - from) * sizeof(Entry));
  std::memcpy(static_cast<void*>(out.data()), bytes.data(), bytes.size());
  uint32_t g = first;
  for (uint64_t i = 0; i < out.size(); ++i) {
    while (from + i >= index.first[g + 1]) ++g;
    if (KeyGroupRanges::group_of(sluice::hash64(out[i].key), index.groups()) != g)
      throw std::runtime_error(file.path() +
                               " is damaged: a state entry is filed under the wrong key group");
  }
  return out;
}

// Worker g's snapshot of checkpoint `id` in `dir` and the snapshots it
// builds on: the state of key groups [first, end) of each, oldest (the
// whole one) first, handed to restore(entries, replace): `replace` false
// for the whole snapshot, true for each later one (its cells replace what
// came before); entries of windows the newest snapshot no longer holds are
// left out. Returns the newest snapshot's header and adds the entries read
// to *read. Every snapshot of the chain must be of this job (`fingerprint`),
// of worker g of as many workers, filed in `groups` key groups.
template <class Entry, class Restore>
WorkerSnapshot read_chain(const std::string& dir, uint64_t id, uint32_t g,
                          const std::string& fingerprint, uint32_t groups, uint32_t first,
                          uint32_t end, const Restore& restore, uint64_t* read) {
  struct Layer {
    std::unique_ptr<SnapshotFile> file;
    StateIndex index;
    WorkerSnapshot header;
  };
  std::vector<Layer> chain;  // newest first
  for (uint64_t at = id;;) {
    Layer l;
    l.file = std::make_unique<SnapshotFile>(snapshot_path(dir, at, g));
    l.header = decode_snapshot(*l.file, at, fingerprint, dir, &l.index);
    const std::string& path = l.file->path();
    if (l.index.groups() != groups) {
      throw std::runtime_error(path + " files its state in " + std::to_string(l.index.groups()) +
                               " key groups, not " + std::to_string(groups));
    }
    if (!chain.empty() && (l.header.worker != chain[0].header.worker ||
                           l.header.workers != chain[0].header.workers)) {
      throw std::runtime_error(path + " holds worker " + std::to_string(l.header.worker) + " of " +
                               std::to_string(l.header.workers) + ", not the worker " +
                               chain.back().file->path() + " builds on");
    }
    const uint64_t base = l.header.base;
    chain.push_back(std::move(l));
    if (base == 0) break;
    at = base;
  }
  const std::vector<int64_t>& live = chain[0].header.windows;
  const bool filter = chain.size() > 1;
  for (size_t i = chain.size(); i-- > 0;) {
    std::vector<Entry> entries = read_state<Entry>(*chain[i].file, chain[i].index, first, end);
    *read += entries.size();
    if (filter && i > 0) {
      std::erase_if(entries, [&](const Entry& e) {
        return !std::binary_search(live.begin(), live.end(), e.time);
      });
    }
    restore(std::span<const Entry>(entries), i + 1 != chain.size());
  }
  return std::move(chain[0].header);
}

// How many workers took the snapshot at `path` (its header alone; the
// whole file is checked when it is read).
inline uint32_t snapshot_workers(const std::string& path) {
  const SnapshotFile file(path);
  SnapshotReader r = read_header(file).rest;
  r.get_string();     // the fingerprint
  r.get<uint64_t>();  // the id
  r.get<uint32_t>();  // the worker
  return r.get<uint32_t>();
}

// A partitioned input's position ("partition:next-offset,...",
// KafkaSource, PartitionedSource) as a map, and back.
inline std::map<int32_t, int64_t> parse_offsets(const std::string& position) {
  std::map<int32_t, int64_t> out;
  size_t at = 0;
  while (at < position.size()) {
    size_t comma = position.find(',', at);
    if (comma == std::string::npos) comma = position.size();
    const std::string item = position.substr(at, comma - at);
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      throw std::runtime_error("bad Kafka position '" + position + "'");
    out[std::stoi(item.substr(0, colon))] = std::stoll(item.substr(colon + 1));
    at = comma + 1;
  }
  return out;
}
inline std::string format_offsets(const std::map<int32_t, int64_t>& offsets) {
  std::string s;
  for (const auto& [p, off] : offsets) {
    if (!s.empty()) s += ',';
    s += std::to_string(p) + ":" + std::to_string(off);
  }
  return s;
}

// Checkpoint `id`'s snapshots of `old` workers merged for a restore on
// another number of workers (engine.h's rescaled restore): each
// partition's read offset and largest event time (old worker g's lane i is
// partition g + i * old: worker g of W reads the partitions p % W == g,
// kafka.h), every worker's sink token, the largest epoch and event time,
// the smallest watermark any worker had heard and had triggered at, and
// the counts summed (in `sum`).
struct MergedSnapshots {
  WorkerSnapshot sum;
  std::map<int32_t, int64_t> offsets, lane_max;
  std::vector<std::pair<uint32_t, std::string>> tokens;
  uint64_t epoch = 0;
  int64_t max_seen = std::numeric_limits<int64_t>::min();
  int64_t low_watermark = std::numeric_limits<int64_t>::max();
  int64_t low_triggered = std::numeric_limits<int64_t>::max();
};

// read(g) reads old worker g's snapshot (folding in the state of the key
// groups this worker owns now); refuse(why) throws. Every snapshot must be in `dir` here.
template <class Read, class Refuse>
MergedSnapshots merge_snapshots(const std::string& dir, uint64_t id, uint32_t old,
                                const Refuse& refuse, const Read& read) {
  MergedSnapshots m;
  std::map<int64_t, uint64_t> late;
  for (uint32_t g = 0; g < old; ++g) {
    const std::string path = snapshot_path(dir, id, g);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      refuse(path +
             " is not on this host: rescaling reads every worker's snapshot, so every rank "
             "must see the checkpoint directory (one host, or a shared file system)");
    }
    const WorkerSnapshot w = read(g);
    if (w.workers != old) refuse(path + " says " + std::to_string(w.workers) + " workers");
    for (const auto& [p, off] : parse_offsets(w.position)) m.offsets[p] = off;
    for (size_t i = 0; i < w.lanes.size(); ++i)
      m.lane_max[static_cast<int32_t>(g + i * old)] = w.lanes[i];
    m.tokens.emplace_back(g, w.token);
    m.epoch = std::max(m.epoch, w.epoch);
    m.max_seen = std::max(m.max_seen, w.max_seen);
    for (int64_t v : w.vc) m.low_watermark = std::min(m.low_watermark, v);
    m.low_triggered = std::min(m.low_triggered, w.triggered);
    m.sum.records_in += w.records_in;
    m.sum.input_bytes += w.input_bytes;
    m.sum.rows += w.rows;
    m.sum.checksum += w.checksum;
    m.sum.epochs += w.epochs;
    for (const LateCount& l : w.late) late[l.window] += l.records;
  }
  for (const auto& [window, n] : late) m.sum.late.push_back({window, n});
  return m;
}

}  // namespace detail

}  // namespace sluice::stream
