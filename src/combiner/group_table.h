// The combiner's table of groups: an open-addressing (linear probing) hash
// table keyed by the group key. Each entry is `stride` 64-bit words: key,
// count (0: the entry is empty), then the layout's aggregate slots.
// Bounded (a source's local table: add() refuses a new group once
// max_groups are held) or growing (a target's table).
//
// Data path: add() and merge() neither allocate nor throw on a bounded
// table; a growing table allocates when it doubles (targets only).
//
// Thread safety: one owning thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "combiner/layout.h"
#include "sluice/detail/hash.h"

namespace sluice::detail {

class GroupTable {
 public:
  GroupTable() = default;
  // Bounded: holds at most `max_groups` (>= 1) groups.
  static GroupTable bounded(std::shared_ptr<const CombineLayout> layout, size_t max_groups);
  // Growing: starts with room for `expected_groups` and doubles when half full.
  static GroupTable growing(std::shared_ptr<const CombineLayout> layout, size_t expected_groups);

  // Folds record `rec` (layout.record_size bytes) into its group. Returns
  // false, changing nothing, if the group is new and the table is full.
  bool add(const std::byte* rec) {
    uint64_t* e = find_or_insert(layout_->key_of(rec));
    if (e == nullptr) [[unlikely]]
      return false;
    e[1] += 1;
    uint64_t* slots = e + 2;
    for (const CombineOp& op : layout_->ops)
      combine(op.how, slots[op.slot], load_value(rec + op.offset, op.type));
    return true;
  }
  // Merges a partial of `count` (>= 1) records whose slots (layout.slots
  // words, possibly unaligned) are at `slots`. Same false rule as add().
  bool merge(uint64_t key, uint64_t count, const std::byte* slots) {
    uint64_t* e = find_or_insert(key);
    if (e == nullptr) [[unlikely]]
      return false;
    e[1] += count;
    uint64_t* held = e + 2;
    for (const CombineOp& op : layout_->ops) {
      combine(op.how, held[op.slot], load_as<uint64_t>(slots + size_t{op.slot} * 8));
    }
    return true;
  }

  size_t size() const { return size_; }
  // Number of entries (empty or not); entry(i) for i < capacity().
  size_t capacity() const { return words_.empty() ? 0 : mask_ + 1; }
  // Entry i: {key, count, slots...}, or nullptr if it is empty.
  const uint64_t* entry(size_t i) const {
    const uint64_t* e = words_.data() + i * stride_;
    return e[1] == 0 ? nullptr : e;
  }
  size_t stride_words() const { return stride_; }
  const CombineLayout& layout() const { return *layout_; }
  const std::shared_ptr<const CombineLayout>& shared_layout() const { return layout_; }
  // Empties the table (O(capacity)).
  void clear();

 private:
  GroupTable(std::shared_ptr<const CombineLayout> layout, size_t capacity, size_t limit,
             bool grows);
  uint64_t* find_or_insert(uint64_t key) {
    size_t i = mix64(key) & mask_;
    for (;;) {
      uint64_t* e = words_.data() + i * stride_;
      if (e[1] == 0) {
        if (size_ >= limit_) [[unlikely]] {
          if (!grows_) return nullptr;
          grow();
          return find_or_insert(key);
        }
        e[0] = key;
        std::copy(layout_->identity.begin(), layout_->identity.end(), e + 2);
        ++size_;
        return e;  // count 0 until the caller adds to it, at once
      }
      if (e[0] == key) return e;
      i = (i + 1) & mask_;
    }
  }
  void grow();

  std::shared_ptr<const CombineLayout> layout_;
  std::vector<uint64_t> words_;
  size_t stride_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
  size_t limit_ = 0;
  bool grows_ = false;
};

}  // namespace sluice::detail
