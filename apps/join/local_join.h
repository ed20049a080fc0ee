// apps/join/local_join.h: the in-memory parts of a join that every variant
// shares: radix partition buffers, cache-sized bucket-chained hash tables,
// and the two single-threaded joins (the reference and the COST baseline).
//
// A radix join here works in three steps on one thread's share of the data:
//   1. partition: every tuple goes, by the low `fbits` bits of its key hash,
//      into one of 2^fbits sub-partitions (PartitionBuffers: fixed-size
//      chunks from a preallocated arena, so no histogram pass is needed to
//      size them and nothing is allocated per tuple); both relations are
//      partitioned the same way;
//   2. build: one sub-partition of the build relation becomes a hash table
//      (tuples grouped by bucket) sized to stay in the CPU cache
//      (JoinTable::build_one);
//   3. probe: the probe relation's tuples of the same sub-partition probe it
//      while it is still in the cache (JoinTable::probe_partition); then the
//      next sub-partition (join_partitions does 2 and 3 for all of them).
// When the whole build side fits in the cache (fbits 0), one table is built
// for all of it and probe tuples go straight to JoinTable::probe.
//
// Ownership: PartitionBuffers owns its arena; a JoinTable owns its copy of
// the build tuples and its bucket offsets.
//
// Thread safety: none of these types is internally synchronised. A built
// JoinTable is immutable, and const probes may run from several threads.
#pragma once

#include <sluice/job.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <vector>

#include "tuples.h"

namespace sluice::join {

// Sub-partition bits for a build side of about `build_tuples` tuples of
// `width` bytes: enough that each sub-partition's table (tuples, chains,
// buckets) stays near kTableTargetBytes. 0 means one table for everything.
inline constexpr size_t kTableTargetBytes = 256 * 1024;
inline constexpr uint32_t kMaxFanoutBits = 12;
inline uint32_t choose_fanout_bits(uint64_t build_tuples, uint32_t width) {
  const uint64_t per_table = kTableTargetBytes / (width + 12);
  if (build_tuples <= per_table) return 0;
  const uint64_t tables = (build_tuples + per_table - 1) / per_table;
  return std::min<uint32_t>(kMaxFanoutBits, static_cast<uint32_t>(std::bit_width(tables - 1)));
}

namespace detail {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64-byte aligned, uninitialised storage for trivially copyable T. Grows
// only by explicit reserve() (setup, or a rare skew overflow), never per
// element.
template <class T>
class Buffer {
 public:
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }
  // Makes room for n elements, keeping the first `keep`. `touch`: write
  // every page now, so that first-touch page faults are paid at setup.
  void reserve(size_t n, size_t keep = 0, bool touch = false) {
    if (n <= capacity_) return;
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + 63) & ~size_t{63};
    std::unique_ptr<T, FreeDeleter> fresh(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!fresh) throw std::bad_alloc();
    if (touch) std::memset(static_cast<void*>(fresh.get()), 0, bytes);
    if (keep != 0) std::memcpy(static_cast<void*>(fresh.get()), data_.get(), keep * sizeof(T));
    data_ = std::move(fresh);
    capacity_ = n;
  }

 private:
  std::unique_ptr<T, FreeDeleter> data_;
  size_t capacity_ = 0;
};

}  // namespace detail

// Fixed-size chunks carved from big preallocated blocks. Allocation is a
// pointer bump; a new block is taken only when the estimate given at
// construction was too small (skew), and counted in blocks_added().
class ChunkArena {
 public:
  ChunkArena(size_t chunk_bytes, size_t expected_chunks)
      : chunk_bytes_(chunk_bytes), block_chunks_(std::max<size_t>(expected_chunks, 16)) {
    add_block();
    blocks_added_ = 0;
  }
  std::byte* allocate() {
    if (next_ == end_) [[unlikely]]
      add_block();
    std::byte* p = next_;
    next_ += chunk_bytes_;
    return p;
  }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t blocks_added() const { return blocks_added_; }

 private:
  void add_block() {
    const size_t bytes = chunk_bytes_ * block_chunks_;
    std::unique_ptr<std::byte, detail::FreeDeleter> b(
        static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
    if (!b) throw std::bad_alloc();
    std::memset(b.get(), 0, bytes);  // first-touch faults at setup, not mid-join
    next_ = b.get();
    end_ = b.get() + bytes;
    blocks_.push_back(std::move(b));
    ++blocks_added_;
    // Later blocks are smaller: they only absorb an estimate's overflow.
    block_chunks_ = std::max<size_t>(block_chunks_ / 4, 64);
  }

  size_t chunk_bytes_;
  size_t block_chunks_;
  std::vector<std::unique_ptr<std::byte, detail::FreeDeleter>> blocks_;
  std::byte* next_ = nullptr;
  std::byte* end_ = nullptr;
  size_t blocks_added_ = 0;
};

// 2^fbits sub-partitions of tuples, filled by add() in any order.
template <class T>
class PartitionBuffers {
 public:
  static constexpr size_t kChunkBytes = 8192;

  // `expected_tuples`: an estimate used to preallocate the arena.
  PartitionBuffers(uint32_t fbits, uint64_t expected_tuples)
      : fbits_(fbits),
        mask_((uint64_t{1} << fbits) - 1),
        parts_(size_t{1} << fbits),
        arena_(kChunkBytes,
               expected_tuples / kPerChunk + expected_tuples / kPerChunk / 4 + parts_.size() + 1) {}

  uint32_t fbits() const { return fbits_; }
  uint32_t num_partitions() const { return static_cast<uint32_t>(parts_.size()); }

  // Appends `t`, whose key hash is `hash`, to its sub-partition.
  void add(const T& t, uint64_t hash) {
    Part& p = parts_[hash & mask_];
    if (p.cur == p.end) [[unlikely]]
      new_chunk(p);
    *p.cur++ = t;
  }
  void add(const T& t) { add(t, key_hash(t.key)); }

  uint64_t size(uint32_t part) const {
    const Part& p = parts_[part];
    return p.full_tuples + (p.tail != nullptr ? static_cast<uint64_t>(p.cur - data(p.tail)) : 0);
  }
  uint64_t total() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < num_partitions(); ++i) n += size(i);
    return n;
  }
  // Calls f(std::span<const T>) for each chunk of sub-partition `part`, in
  // insertion order.
  template <class F>
  void for_each_chunk(uint32_t part, F&& f) const {
    const Part& p = parts_[part];
    for (const Chunk* c = p.head; c != nullptr; c = c->next) {
      const size_t n = c == p.tail ? static_cast<size_t>(p.cur - data(c)) : kPerChunk;
      f(std::span<const T>(data(c), n));
    }
  }
  size_t arena_blocks_added() const { return arena_.blocks_added(); }

 private:
  struct Chunk {
    Chunk* next;
    uint64_t pad;
  };
  static constexpr size_t kHeader = 64;  // keeps tuples cache-line aligned
  static constexpr size_t kPerChunk = (kChunkBytes - kHeader) / sizeof(T);
  static T* data(const Chunk* c) {
    return reinterpret_cast<T*>(reinterpret_cast<std::byte*>(const_cast<Chunk*>(c)) + kHeader);
  }
  struct Part {
    Chunk* head = nullptr;
    Chunk* tail = nullptr;
    T* cur = nullptr;
    T* end = nullptr;
    uint64_t full_tuples = 0;
  };
  void new_chunk(Part& p) {
    auto* c = reinterpret_cast<Chunk*>(arena_.allocate());
    c->next = nullptr;
    if (p.tail != nullptr) {
      p.tail->next = c;
      p.full_tuples += kPerChunk;
    } else {
      p.head = c;
    }
    p.tail = c;
    p.cur = data(c);
    p.end = p.cur + kPerChunk;
  }

  uint32_t fbits_;
  uint64_t mask_;
  std::vector<Part> parts_;
  ChunkArena arena_;
};

// Hash tables, one per sub-partition, over the build side, each laid out
// by bucket: the tuples of bucket b are contiguous, at [start[b], start[b+1])
// of one array, so a probe reads two adjacent offsets and then scans a short
// run of tuples (no chain pointers to chase). Building one is a counting
// sort of the sub-partition by bucket: count, prefix sums, scatter.
// Duplicates of a key are separate entries, so a probe meets every one.
template <class T>
class JoinTable;
template <bool kSwapped, class T, class TableOf>
void probe_many(std::span<const T> in, TableOf&& table_of, JoinResult& out);

template <class T>
class JoinTable {
 public:
  explicit JoinTable(uint32_t fbits = 0) : fbits_(fbits), parts_(size_t{1} << fbits) {}

  // Preallocates for `tuples` build tuples (touching the pages now): all of
  // them for build(), the largest sub-partition for build_one().
  void reserve(uint64_t tuples) {
    tuples_.reserve(tuples, 0, true);
    buckets_.reserve(tuples, 0, true);
    starts_.reserve(2 * tuples + 2 * parts_.size(), 0, true);
  }

  // Builds every sub-partition of `in` (which must use this table's fbits).
  // Sub-partitions that are empty in `in` stay empty, so a table may hold
  // only some of them.
  void build(const PartitionBuffers<T>& in) {
    uint64_t starts = 0;
    for (uint32_t p = 0; p < in.num_partitions(); ++p) starts += buckets_for(in.size(p)) + 1;
    ensure(in.total(), starts);
    uint64_t at = 0, start_at = 0;
    for (uint32_t p = 0; p < in.num_partitions(); ++p) {
      const uint64_t n = in.size(p);
      layout(p, at, n, start_at, [&](auto&& f) { in.for_each_chunk(p, f); });
      at += n;
      start_at += buckets_for(n) + 1;
    }
  }

  // Builds only sub-partition `p` of `in`, reusing this table's memory (the
  // previous one's table is gone): the classic radix join order, building
  // each cache-sized table just before probing it so that it is still in
  // the cache. Only probes of sub-partition p are valid afterwards.
  void build_one(const PartitionBuffers<T>& in, uint32_t p) {
    const uint64_t n = in.size(p);
    ensure(n, buckets_for(n) + 1);
    layout(p, 0, n, 0, [&](auto&& f) { in.for_each_chunk(p, f); });
  }

  // One table (fbits must be 0) over a copy of `rows`.
  void build_from(std::span<const T> rows) {
    if (fbits_ != 0) throw std::logic_error("JoinTable::build_from needs fbits 0");
    ensure(rows.size(), buckets_for(rows.size()) + 1);
    layout(0, 0, rows.size(), 0, [&](auto&& f) { f(rows); });
  }

  uint32_t fbits() const { return fbits_; }

  template <bool kSwapped>
  void probe(const T& s, uint64_t hash, JoinResult& out) const {
    const uint64_t* b = bucket(hash);
    scan<kSwapped>(b[0], b[1], s, out);
  }
  // Where the bucket of a key with hash `hash` starts; its end is the next
  // entry.
  const uint64_t* bucket(uint64_t hash) const {
    const Part& p = parts_[hash & ((uint64_t{1} << fbits_) - 1)];
    return starts_.data() + p.start_offset + ((hash >> fbits_) & p.mask);
  }
  const T* tuple(uint64_t i) const { return tuples_.data() + i; }
  // Adds every match of `s` among tuples [begin, end).
  template <bool kSwapped>
  void scan(uint64_t begin, uint64_t end, const T& s, JoinResult& out) const {
    for (const T* r = tuples_.data() + begin; r != tuples_.data() + end; ++r) {
      if (r->key == s.key) {
        ++out.matches;
        out.checksum += kSwapped ? pair_checksum(s.key, payload_of(s), payload_of(*r))
                                 : pair_checksum(s.key, payload_of(*r), payload_of(s));
      }
    }
  }
  // Probes every tuple of sub-partition `part` of `probe_side` against this
  // table's sub-partition `part`.
  template <bool kSwapped>
  void probe_partition(uint32_t part, const PartitionBuffers<T>& probe_side,
                       JoinResult& out) const {
    probe_side.for_each_chunk(part, [&](std::span<const T> c) {
      probe_many<kSwapped>(
          c, [this](uint64_t) { return this; }, out);
    });
  }

 private:
  struct Part {
    uint64_t start_offset = 0;
    uint64_t mask = 0;
  };
  static uint64_t buckets_for(uint64_t n) { return std::bit_ceil(std::max<uint64_t>(n, 1)); }
  void ensure(uint64_t tuples, uint64_t starts) {
    if (tuples > tuples_.capacity()) tuples_.reserve(tuples);
    if (tuples > buckets_.capacity()) buckets_.reserve(tuples);
    if (starts > starts_.capacity()) starts_.reserve(starts);
  }
  // Lays out the n tuples that `for_each(f)` hands over (as spans) at
  // tuples_[at, at + n), sorted by bucket, with their bucket starts at
  // starts_[start_at, ...]: starts_[start_at + b] is where bucket b begins
  // and starts_[start_at + B] == at + n.
  template <class ForEach>
  void layout(uint32_t p, uint64_t at, uint64_t n, uint64_t start_at, ForEach&& for_each) {
    const uint64_t nb = buckets_for(n), mask = nb - 1;
    uint64_t* start = starts_.data() + start_at;
    uint32_t* bucket_of = buckets_.data() + at;
    // Counts land one slot up, so that after the prefix sum start[b] is the
    // beginning of bucket b and the scatter below can use start[b + 1] as
    // bucket b's cursor, leaving start[b + 1] at b's end = b+1's beginning.
    std::memset(start, 0, (nb + 1) * sizeof(uint64_t));
    uint64_t i = 0;
    for_each([&](std::span<const T> c) {
      for (const T& t : c) {
        const auto b = static_cast<uint32_t>((key_hash(t.key) >> fbits_) & mask);
        bucket_of[i++] = b;
        ++start[b + 1];
      }
    });
    uint64_t sum = at;
    for (uint64_t b = 0; b <= nb; ++b) {
      const uint64_t c = start[b];
      start[b] = sum;
      sum += c;
    }
    // Now start[0] == at and start[b + 1] is the beginning of bucket b.
    T* dst = tuples_.data();
    i = 0;
    for_each([&](std::span<const T> c) {
      for (const T& t : c) dst[start[bucket_of[i++] + 1]++] = t;
    });
    parts_[p] = Part{start_at, mask};
  }

  uint32_t fbits_;
  std::vector<Part> parts_;
  detail::Buffer<T> tuples_;
  detail::Buffer<uint32_t> buckets_;  // scratch: each tuple's bucket while building
  detail::Buffer<uint64_t> starts_;
};

// Probes every tuple of `in` against the table `table_of(hash)` returns
// (one JoinTable, or the one of several that holds that sub-partition), in
// groups: first the hashes and a prefetch of each bucket's start, then a
// prefetch of each bucket's first tuple, then the scans. The loads of a
// group overlap instead of each probe waiting for its own cache misses.
template <bool kSwapped, class T, class TableOf>
void probe_many(std::span<const T> in, TableOf&& table_of, JoinResult& out) {
  constexpr size_t kGroup = 16;
  const uint64_t* slot[kGroup];
  const JoinTable<T>* table[kGroup];
  JoinResult acc;  // a local, so the compiler keeps it in registers (`out` may alias)
  for (size_t i = 0; i < in.size(); i += kGroup) {
    const size_t n = std::min(kGroup, in.size() - i);
    for (size_t k = 0; k < n; ++k) {
      const uint64_t h = key_hash(in[i + k].key);
      table[k] = table_of(h);
      slot[k] = table[k]->bucket(h);
      __builtin_prefetch(slot[k]);
    }
    for (size_t k = 0; k < n; ++k) __builtin_prefetch(table[k]->tuple(slot[k][0]));
    for (size_t k = 0; k < n; ++k)
      table[k]->template scan<kSwapped>(slot[k][0], slot[k][1], in[i + k], acc);
  }
  out.add(acc);
}

// The reference join: one hash table over the smaller relation,
// probed with every tuple of the other. Single-threaded and simple on
// purpose; the distributed joins are checked against it.
template <class T>
JoinResult hash_join(std::span<const T> r, std::span<const T> s) {
  JoinResult out;
  JoinTable<T> table(0);
  auto the_table = [&table](uint64_t) { return &table; };
  if (r.size() <= s.size()) {
    table.build_from(r);
    probe_many<false>(s, the_table, out);
  } else {
    table.build_from(s);
    probe_many<true>(r, the_table, out);
  }
  return out;
}

// Seconds spent per step of radix_join (single-threaded).
struct LocalTimes {
  double partition = 0, build = 0, probe = 0;
  double cpu = 0;  // process CPU seconds over the three
};

// The single-threaded radix join (the strongest one-thread baseline here):
// partition both relations into cache-sized sub-partitions, build a table
// per sub-partition of the smaller one, probe each with the other's.
// Joins sub-partition by sub-partition: build one cache-sized table from
// `build`'s sub-partition p, probe it with `probe`'s sub-partition p, next
// p. `table` (built with the same fbits) is the scratch table; `build_seconds`
// (may be null) receives the time spent building.
template <class T, class Clock = std::chrono::steady_clock>
JoinResult join_partitions(const PartitionBuffers<T>& build, const PartitionBuffers<T>& probe,
                           bool swapped, JoinTable<T>& table, double* build_seconds) {
  JoinResult out;
  typename Clock::duration building{};
  for (uint32_t p = 0; p < build.num_partitions(); ++p) {
    if (build.size(p) == 0 || probe.size(p) == 0) continue;
    const auto t0 = Clock::now();
    table.build_one(build, p);
    building += Clock::now() - t0;
    if (swapped)
      table.template probe_partition<true>(p, probe, out);
    else
      table.template probe_partition<false>(p, probe, out);
  }
  if (build_seconds != nullptr) *build_seconds = std::chrono::duration<double>(building).count();
  return out;
}

// Room for the largest sub-partition of about `tuples` tuples spread over
// 2^fbits sub-partitions (with slack for uneven hashing; a skewed one grows
// the table once).
inline uint64_t largest_partition_estimate(uint64_t tuples, uint32_t fbits) {
  const uint64_t mean = tuples >> fbits;
  return mean + mean / 4 + 4 * static_cast<uint64_t>(std::sqrt(static_cast<double>(mean))) + 64;
}

// The single-threaded radix join (the strongest one-thread baseline here):
// partition both relations into cache-sized sub-partitions, then build and
// probe sub-partition by sub-partition (build side: the smaller relation).
template <class T, class Clock = std::chrono::steady_clock>
JoinResult radix_join(std::span<const T> r, std::span<const T> s, LocalTimes* times) {
  const bool swapped = s.size() < r.size();
  std::span<const T> build = swapped ? s : r, probe = swapped ? r : s;
  const uint32_t fbits = choose_fanout_bits(build.size(), sizeof(T));
  PartitionBuffers<T> bp(fbits, build.size()), pp(fbits, probe.size());
  JoinTable<T> table(fbits);
  table.reserve(largest_partition_estimate(build.size(), fbits));
  const double cpu1 = process_cpu_seconds();
  auto t1 = Clock::now();
  for (const T& t : build) bp.add(t);
  for (const T& t : probe) pp.add(t);
  auto t2 = Clock::now();
  double build_seconds = 0;
  const JoinResult out = join_partitions<T, Clock>(bp, pp, swapped, table, &build_seconds);
  auto t3 = Clock::now();
  if (times != nullptr) {
    times->partition = std::chrono::duration<double>(t2 - t1).count();
    times->build = build_seconds;
    times->probe = std::chrono::duration<double>(t3 - t2).count() - build_seconds;
    times->cpu = process_cpu_seconds() - cpu1;
  }
  return out;
}

}  // namespace sluice::join
