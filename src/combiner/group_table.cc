// The group table's slow paths: construction, clearing and growing.
#include "combiner/group_table.h"

#include <bit>

namespace sluice::detail {

GroupTable::GroupTable(std::shared_ptr<const CombineLayout> layout, size_t capacity, size_t limit,
                       bool grows)
    : layout_(std::move(layout)),
      stride_(2 + layout_->slots),
      mask_(capacity - 1),
      limit_(limit),
      grows_(grows) {
  words_.assign(capacity * stride_, 0);
}

GroupTable GroupTable::bounded(std::shared_ptr<const CombineLayout> layout, size_t max_groups) {
  // At most half full: linear probing stays short even at the limit.
  const size_t capacity = std::bit_ceil(std::max<size_t>(8, 2 * std::max<size_t>(1, max_groups)));
  return GroupTable(std::move(layout), capacity, std::max<size_t>(1, max_groups), false);
}

GroupTable GroupTable::growing(std::shared_ptr<const CombineLayout> layout,
                               size_t expected_groups) {
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, 2 * expected_groups));
  return GroupTable(std::move(layout), capacity, capacity / 2, true);
}

void GroupTable::clear() {
  std::fill(words_.begin(), words_.end(), 0);
  size_ = 0;
}

void GroupTable::grow() {
  std::vector<uint64_t> old = std::move(words_);
  const size_t old_capacity = mask_ + 1;
  const size_t capacity = old_capacity * 2;
  words_.assign(capacity * stride_, 0);
  mask_ = capacity - 1;
  limit_ = capacity / 2;
  for (size_t i = 0; i < old_capacity; ++i) {
    const uint64_t* e = old.data() + i * stride_;
    if (e[1] == 0) continue;
    size_t j = mix64(e[0]) & mask_;
    while (words_[j * stride_ + 1] != 0) j = (j + 1) & mask_;
    std::copy(e, e + stride_, words_.begin() + static_cast<std::ptrdiff_t>(j * stride_));
  }
}

}  // namespace sluice::detail
