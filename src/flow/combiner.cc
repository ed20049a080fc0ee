// Combiner flows: the layout of partials, the group tables' slow paths, and
// the source and target halves that sit on a byte-record shuffle flow.
#include "sluice/combiner.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>

namespace sluice {
namespace detail {
namespace {

[[noreturn]] void invalid(const CombineLayout& l, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "combiner '" + l.name + "': " + what);
}

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kI8:
      return "i8";
    case ValueType::kI16:
      return "i16";
    case ValueType::kI32:
      return "i32";
    case ValueType::kI64:
      return "i64";
    case ValueType::kU8:
      return "u8";
    case ValueType::kU16:
      return "u16";
    case ValueType::kU32:
      return "u32";
    case ValueType::kU64:
      return "u64";
    case ValueType::kF32:
      return "f32";
    case ValueType::kF64:
      return "f64";
  }
  return "?";
}

const char* agg_name(uint8_t agg) {
  switch (agg) {
    case kAggSum:
      return "SUM";
    case kAggMin:
      return "MIN";
    case kAggMax:
      return "MAX";
    case kAggAvg:
      return "AVG";
  }
  return "?";
}

const char* agg_call(uint8_t agg) {
  switch (agg) {
    case kAggSum:
      return ".sum(&T::field)";
    case kAggMin:
      return ".min(&T::field)";
    case kAggMax:
      return ".max(&T::field)";
    case kAggAvg:
      return ".avg(&T::field) or .sum(&T::field)";
  }
  return "?";
}

// The operation of each aggregate for each kind of value, and the value an
// empty group starts from: a neutral element, so that the first value (or
// partial) folds in like every later one. The float sum starts from -0.0,
// IEEE's true additive identity (+0.0 would turn a sum of -0.0s into +0.0);
// float MIN and MAX start from NaN, which float_below() lets any number
// replace.
Combine sum_op(ValueKind k) {
  return k == ValueKind::kFloat ? Combine::kSumFloat : Combine::kSumInt;
}
Combine min_op(ValueKind k) {
  return k == ValueKind::kSigned     ? Combine::kMinSigned
         : k == ValueKind::kUnsigned ? Combine::kMinUnsigned
                                     : Combine::kMinFloat;
}
Combine max_op(ValueKind k) {
  return k == ValueKind::kSigned     ? Combine::kMaxSigned
         : k == ValueKind::kUnsigned ? Combine::kMaxUnsigned
                                     : Combine::kMaxFloat;
}
uint64_t identity_of(Combine how) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  switch (how) {
    case Combine::kSumInt:
      return 0;
    case Combine::kSumFloat:
      return std::bit_cast<uint64_t>(-0.0);
    case Combine::kMinSigned:
      return static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    case Combine::kMinUnsigned:
      return std::numeric_limits<uint64_t>::max();
    case Combine::kMaxSigned:
      return static_cast<uint64_t>(std::numeric_limits<int64_t>::min());
    case Combine::kMaxUnsigned:
      return 0;
    case Combine::kMinFloat:
    case Combine::kMaxFloat:
      return std::bit_cast<uint64_t>(kNan);
  }
  return 0;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

}  // namespace

void CombineLayout::declare_field(uint32_t offset, ValueType type, uint8_t aggs) {
  for (CombineField& f : fields) {
    if (f.offset != offset) continue;
    if (f.type != type) {
      invalid(*this, "the field at offset " + std::to_string(offset) + " is declared both as " +
                         value_type_name(f.type) + " and as " + value_type_name(type));
    }
    f.aggs |= aggs;
    rebuild();
    return;
  }
  fields.push_back(CombineField{offset, type, aggs});
  rebuild();
}

void CombineLayout::rebuild() {
  ops.clear();
  identity.clear();
  uint32_t slot = 0;
  auto add = [&](const CombineField& f, Combine how, int32_t* where) {
    *where = static_cast<int32_t>(slot);
    ops.push_back(CombineOp{f.offset, f.type, how, slot});
    identity.push_back(identity_of(how));
    ++slot;
  };
  for (CombineField& f : fields) {
    f.sum_slot = f.min_slot = f.max_slot = -1;
    const ValueKind k = kind_of(f.type);
    if (f.aggs & (kAggSum | kAggAvg)) add(f, sum_op(k), &f.sum_slot);
    if (f.aggs & kAggMin) add(f, min_op(k), &f.min_slot);
    if (f.aggs & kAggMax) add(f, max_op(k), &f.max_slot);
  }
  slots = slot;
  const std::string text = describe();
  tag = static_cast<uint32_t>(hash_bytes(text.data(), text.size()));
}

void CombineLayout::validate() const {
  if (!has_key) invalid(*this, "has no group key; name an integer field with .group_by(&T::field)");
  if (fields.empty() && !count) {
    invalid(*this, "aggregates nothing; declare .count() or .sum/.min/.max/.avg(&T::field)");
  }
}

std::string CombineLayout::describe() const {
  std::string out = std::string("key ") + (has_key ? value_type_name(key_type) : "none") + "@" +
                    std::to_string(key_offset);
  if (count) out += "; count";
  for (size_t i = 0; i < fields.size(); ++i) {
    const CombineField& f = fields[i];
    out +=
        "; f" + std::to_string(i) + " " + value_type_name(f.type) + "@" + std::to_string(f.offset);
    if (f.aggs & kAggSum) out += " sum";
    if (f.aggs & kAggMin) out += " min";
    if (f.aggs & kAggMax) out += " max";
    if (f.aggs & kAggAvg) out += " avg";
  }
  return out;
}

uint32_t CombineLayout::partial_bytes() const { return kPartialSlotsOffset + 8 * slots; }

size_t CombineLayout::field_index(uint32_t offset, ValueType type, const char* what) const {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].offset == offset && fields[i].type == type) return i;
  }
  invalid(*this, std::string(what) + ": the " + value_type_name(type) + " field at offset " +
                     std::to_string(offset) + " was not declared; declared: " + describe());
}

uint32_t CombineLayout::slot_of(size_t field, uint8_t agg) const {
  if (field >= fields.size()) {
    invalid(*this, "field " + std::to_string(field) + " does not exist; " +
                       std::to_string(fields.size()) + " value fields were declared (" +
                       describe() + ")");
  }
  const CombineField& f = fields[field];
  const int32_t slot = agg == kAggMin ? f.min_slot : agg == kAggMax ? f.max_slot : f.sum_slot;
  if (slot < 0) {
    invalid(*this, std::string(agg_name(agg)) + " of field " + std::to_string(field) + " (" +
                       value_type_name(f.type) + " at offset " + std::to_string(f.offset) +
                       ") was not declared; add " + agg_call(agg) + " to the spec");
  }
  return static_cast<uint32_t>(slot);
}

// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------

CombinerSourceCore::CombinerSourceCore(std::shared_ptr<const CombineLayout> layout,
                                       size_t local_groups, BytesSource out)
    : layout_(std::move(layout)), out_(std::move(out)) {
  layout_->validate();
  table_ = GroupTable::bounded(layout_, local_groups);
  partial_.assign(layout_->partial_bytes(), std::byte{0});
  std::memcpy(partial_.data() + kPartialTagOffset, &layout_->tag, 4);
}

Status CombinerSourceCore::drain(Deadline deadline, bool try_only) {
  const size_t slot_bytes = size_t{layout_->slots} * 8;
  for (; cursor_ < table_.capacity(); ++cursor_) {
    const uint64_t* e = table_.entry(cursor_);
    if (e == nullptr) continue;
    std::memcpy(partial_.data() + kPartialKeyOffset, e, 8);
    std::memcpy(partial_.data() + kPartialCountOffset, e + 1, 8);
    std::memcpy(partial_.data() + kPartialSlotsOffset, e + 2, slot_bytes);
    const std::span<const std::byte> rec(partial_.data(), partial_.size());
    const Status s = try_only ? out_.try_push(rec) : out_.push(rec, deadline);
    if (s != Status::kOk) return s;  // this entry goes again on the next call
    ++partials_sent_;
  }
  table_.clear();
  cursor_ = 0;
  draining_ = false;
  accepting_ = !closed_;
  return Status::kOk;
}

Status CombinerSourceCore::push_slow(const std::byte* rec, Deadline deadline, bool try_only) {
  if (closed_) {
    error_ = "combiner '" + layout_->name + "': push after close()";
    return Status::kClosed;
  }
  error_.clear();
  if (!draining_) {
    // The table is full and `rec` starts a new group: send the table.
    ++table_flushes_;
    draining_ = true;
    accepting_ = false;
  }
  const Status s = drain(deadline, try_only);
  if (s != Status::kOk) return s;
  const bool added = table_.add(rec);
  // An empty table always has room for one group.
  if (!added) [[unlikely]] {
    error_ =
        "combiner '" + layout_->name + "': internal error: an empty local table refused a group";
    return Status::kInvalid;
  }
  return Status::kOk;
}

Status CombinerSourceCore::flush(Deadline deadline) {
  error_.clear();
  if (!closed_ && !draining_ && table_.size() > 0) {
    draining_ = true;
    accepting_ = false;
  }
  if (draining_) {
    const Status s = drain(deadline, false);
    if (s != Status::kOk) return s;
  }
  return out_.flush(deadline);
}

Status CombinerSourceCore::close(Deadline deadline) {
  error_.clear();
  if (!closed_) {
    if (!draining_ && table_.size() > 0) draining_ = true;
    accepting_ = false;
    if (draining_) {
      const Status s = drain(deadline, false);
      if (s != Status::kOk) return s;
    }
    closed_ = true;
    accepting_ = false;
  }
  return out_.close(deadline);
}

// ---------------------------------------------------------------------------

CombinerTargetCore::CombinerTargetCore(std::shared_ptr<const CombineLayout> layout,
                                       size_t expected_groups, BytesTarget in)
    : layout_(std::move(layout)), in_(std::move(in)) {
  layout_->validate();
  table_ = GroupTable::growing(layout_, expected_groups);
}

Status CombinerTargetCore::merge(const RecordBatch& batch) {
  const size_t want = layout_->partial_bytes();
  for (std::span<const std::byte> rec : batch) {
    uint32_t tag = 0;
    uint64_t key = 0, count = 0;
    if (rec.size() >= kPartialSlotsOffset) {
      std::memcpy(&tag, rec.data() + kPartialTagOffset, 4);
      std::memcpy(&key, rec.data() + kPartialKeyOffset, 8);
      std::memcpy(&count, rec.data() + kPartialCountOffset, 8);
    }
    if (rec.size() != want || tag != layout_->tag || count == 0) [[unlikely]] {
      const uint32_t source = in_.last_source();
      if (rec.size() != want || tag != layout_->tag) {
        error_ = "combiner '" + layout_->name + "': source " + std::to_string(source) +
                 " sent a partial of " + std::to_string(rec.size()) + " bytes with layout tag " +
                 hex32(tag) + ", but this target declared " + std::to_string(want) +
                 "-byte partials with tag " + hex32(layout_->tag) + " (" + layout_->describe() +
                 "); every participant must declare the same group_by, value fields and aggregates "
                 "in the same order";
      } else {
        error_ = "combiner '" + layout_->name + "': source " + std::to_string(source) +
                 " sent a partial of group " + std::to_string(key) +
                 " with a count of 0 (a corrupt segment)";
      }
      failed_ = Status::kInvalid;
      return Status::kInvalid;
    }
    table_.merge(key, count, rec.data() + kPartialSlotsOffset);
    ++partials_merged_;
  }
  return Status::kOk;
}

Status CombinerTargetCore::settle(Status s) {
  if (s == Status::kEndOfFlow) {
    result_ = CombinerResult::from_table(table_);
    table_ = GroupTable();
    done_ = true;
    return Status::kEndOfFlow;
  }
  if (s == Status::kPeerLost || s == Status::kInvalid) failed_ = s;
  return s;
}

Status CombinerTargetCore::poll() {
  if (done_) return Status::kEndOfFlow;
  if (failed_ != Status::kOk) return failed_;
  // A bounded number of batches, so a busy flow cannot keep a thread that is
  // also a source from its own pushing.
  for (int i = 0; i < 16; ++i) {
    auto batch = in_.try_consume();
    if (!batch) {
      const Status s = in_.status();
      return s == Status::kTimeout ? Status::kOk : settle(s);
    }
    if (merge(*batch) != Status::kOk) return Status::kInvalid;
  }
  return Status::kOk;
}

Status CombinerTargetCore::collect(Deadline deadline) {
  if (done_) return Status::kOk;
  if (failed_ != Status::kOk) return failed_;
  for (;;) {
    auto batch = in_.consume(deadline);
    if (!batch) {
      const Status s = settle(in_.status());
      return s == Status::kEndOfFlow ? Status::kOk : s;
    }
    if (merge(*batch) != Status::kOk) return Status::kInvalid;
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------

Value Group::value(size_t field, uint8_t agg) const {
  const uint32_t slot = layout_->slot_of(field, agg);
  return Value(detail::kind_of(layout_->fields[field].type), slots_[slot]);
}

const Group* CombinerResult::find(uint64_t key) const {
  auto it = std::lower_bound(groups_.begin(), groups_.end(), key,
                             [](const Group& g, uint64_t k) { return g.key < k; });
  return it != groups_.end() && it->key == key ? &*it : nullptr;
}

CombinerResult CombinerResult::from_table(const detail::GroupTable& table) {
  CombinerResult r;
  r.layout_ = table.shared_layout();
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
