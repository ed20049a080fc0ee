// The combiner layout: declaring fields, deriving slots and their identity
// values, describing and checking a layout.
#include "combiner/layout.h"

#include <bit>
#include <limits>

#include "combiner/partial.h"
#include "sluice/detail/hash.h"
#include "sluice/errors.h"

namespace sluice::detail {
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

uint32_t CombineLayout::partial_bytes() const { return detail::partial_bytes(slots); }

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

}  // namespace sluice::detail
