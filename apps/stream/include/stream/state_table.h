// stream/state_table.h: the hash table that holds one window's partial
// aggregates, key -> State (open addressing, linear probing).
//
// Keys are any 64-bit value; occupancy lives in a separate byte array so no
// key value is reserved. The table doubles when it is half full: growth is
// amortised over the inserts (no allocation on the common path, which is a
// probe and an update in place). clear() keeps the capacity, so a delta
// table reused every epoch stops allocating once it has the size of an
// epoch's distinct keys.
//
// Each entry is clean or changed: upsert() marks the entry it hands out
// changed (its caller is about to update it), and take_changed() hands out
// the changed ones (or all) and marks them clean, which is what an
// incremental checkpoint writes (checkpoint.h). The mark lives in the
// occupancy byte the probe reads anyway.
//
// Thread safety: one thread at a time.
#pragma once

#include <sluice/hash.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace sluice::stream {

template <class State>
class StateTable {
 public:
  struct Slot {
    uint64_t key;
    State state;
  };

  explicit StateTable(size_t initial = 64) { reset(initial); }

  // The state of `key` (hash: sluice::hash64(key)), made with `init` if absent.
  template <class Init>
  State& upsert(uint64_t key, uint64_t hash, const Init& init) {
    size_t i = hash & mask_;
    for (;;) {
      if (!used_[i]) {
        if ((size_ + 1) * 2 > slots_.size()) [[unlikely]] {
          grow();
          return upsert(key, hash, init);
        }
        used_[i] = kChanged;
        slots_[i].key = key;
        slots_[i].state = init();
        ++size_;
        return slots_[i].state;
      }
      if (slots_[i].key == key) {
        used_[i] = kChanged;
        return slots_[i].state;
      }
      i = (i + 1) & mask_;
    }
  }

  // The state of `key` (hash: sluice::hash64(key)), or null if absent.
  const State* find(uint64_t key, uint64_t hash) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      if (!used_[i]) return nullptr;
      if (slots_[i].key == key) return &slots_[i].state;
    }
  }

  // Calls f(key, state) for every entry, in slot order.
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (used_[i]) f(slots_[i].key, slots_[i].state);
  }

  // Calls f(key, state&) for every entry, in slot order; f may change the state.
  template <class F>
  void for_each_mut(F&& f) {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (used_[i]) f(slots_[i].key, slots_[i].state);
  }

  // Calls f(key, state) for every entry changed since the last call (every
  // entry if `all`), in slot order, and marks them all clean. f must not
  // change the table. The occupancy bytes are read eight at a time (a
  // sparse delta skips most words whole), and the entries found are handed
  // out a batch at a time, each batch's slots prefetched before any is
  // read: the changed slots of a large table are scattered cache misses,
  // and this overlaps them.
  template <class F>
  void take_changed(bool all, F&& f) {
    constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full, kHigh = 0x8080808080808080ull;
    constexpr uint64_t kChangedBytes = 0x0202020202020202ull;
    static_assert(kChanged == 2 && std::endian::native == std::endian::little);
    // The high bit of each byte of x that is zero (exact: no carry crosses a byte).
    const auto zero_bytes = [](uint64_t x) { return ~(((x & kLow7) + kLow7) | x) & kHigh; };
    constexpr size_t kBatch = 32;
    size_t batch[kBatch];
    size_t n = 0;
    const auto hand_out = [&] {
      for (size_t k = 0; k < n; ++k) f(slots_[batch[k]].key, slots_[batch[k]].state);
      n = 0;
    };
    const size_t size = used_.size();  // a power of two, at least 16
    for (size_t w = 0; w < size; w += 8) {
      uint64_t x;
      std::memcpy(&x, used_.data() + w, sizeof x);
      uint64_t hits = all ? ~zero_bytes(x) & kHigh : zero_bytes(x ^ kChangedBytes);
      for (; hits != 0; hits &= hits - 1) {
        const size_t i = w + static_cast<size_t>(std::countr_zero(hits)) / 8;
        used_[i] = kClean;
        __builtin_prefetch(&slots_[i]);
        batch[n++] = i;
        if (n == kBatch) hand_out();
      }
    }
    hand_out();
  }

  void clear() {
    if (size_ == 0) return;
    std::memset(used_.data(), 0, used_.size());
    size_ = 0;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Bytes the table holds (slots and occupancy), for the state-size report.
  size_t bytes() const { return slots_.size() * (sizeof(Slot) + 1); }

 private:
  static constexpr uint8_t kEmpty = 0, kClean = 1, kChanged = 2;

  void reset(size_t capacity) {
    size_t c = 16;
    while (c < capacity) c *= 2;
    slots_.assign(c, Slot{});
    used_.assign(c, 0);
    mask_ = c - 1;
    size_ = 0;
  }
  void grow() {
    std::vector<Slot> old_slots = std::move(slots_);
    std::vector<uint8_t> old_used = std::move(used_);
    reset(old_slots.size() * 2);
    for (size_t i = 0; i < old_slots.size(); ++i) {
      if (!old_used[i]) continue;
      const Slot& s = old_slots[i];
      size_t j = sluice::hash64(s.key) & mask_;
      while (used_[j]) j = (j + 1) & mask_;
      used_[j] = old_used[i];
      slots_[j] = s;
      ++size_;
    }
  }

  std::vector<Slot> slots_;
  std::vector<uint8_t> used_;  // kEmpty, kClean or kChanged
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace sluice::stream
