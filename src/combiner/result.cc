// Final combiner results: taking the groups out of a target's table, and
// reading one group's aggregates.
#include <algorithm>

#include "combiner/group_table.h"
#include "sluice/combiner.h"

namespace sluice {

Value Group::value(size_t field, uint8_t agg) const {
  const uint32_t slot = layout_->slot_of(field, agg);
  return Value(detail::kind_of(layout_->fields[field].type), slots_[slot]);
}

size_t Group::field_index(uint32_t offset, detail::ValueType type) const {
  return layout_->field_index(offset, type, "Group");
}

const Group* CombinerResult::find(uint64_t key) const {
  auto it = std::lower_bound(groups_.begin(), groups_.end(), key,
                             [](const Group& g, uint64_t k) { return g.key < k; });
  return it != groups_.end() && it->key == key ? &*it : nullptr;
}

CombinerResult detail::result_from_table(const GroupTable& table, uint64_t partials) {
  CombinerResult r;
  r.layout_ = table.shared_layout();
  r.partials_ = partials;
  std::vector<const uint64_t*> entries;
  entries.reserve(table.size());
  for (size_t i = 0; i < table.capacity(); ++i) {
    if (const uint64_t* e = table.entry(i)) entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const uint64_t* a, const uint64_t* b) { return a[0] < b[0]; });
  const size_t slots = r.layout_->slots;
  r.slots_.resize(entries.size() * slots);
  r.groups_.resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    std::copy(entries[i] + 2, entries[i] + 2 + slots,
              r.slots_.begin() + static_cast<std::ptrdiff_t>(i * slots));
    Group& g = r.groups_[i];
    g.key = entries[i][0];
    g.count = entries[i][1];
    g.slots_ = r.slots_.data() + i * slots;
    g.layout_ = r.layout_.get();
  }
  return r;
}

}  // namespace sluice
