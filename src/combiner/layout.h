// What a combiner aggregates, as the data path reads it: the group key, the
// value fields with their aggregates, and the slot layout of a group (and of
// a partial) derived from them. Built once per spec at setup (every builder
// call of sluice::CombinerSpec makes a new one); read-only afterwards, and
// shared by the spec, its sources and targets, and the results they hand out.
//
// Thread safety: a CombineLayout is immutable once built; any number of
// threads may read it.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/combiner.h"

namespace sluice::detail {

constexpr ValueKind kind_of(ValueType t) {
  return t <= ValueType::kI64   ? ValueKind::kSigned
         : t <= ValueType::kU64 ? ValueKind::kUnsigned
                                : ValueKind::kFloat;
}

template <class V>
V load_as(const std::byte* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// The value at `p` in its held form: sign- or zero-extended to 64 bits, or
// the bits of the double it widens to.
inline uint64_t load_value(const std::byte* p, ValueType t) {
  switch (t) {
    case ValueType::kI8:
      return static_cast<uint64_t>(int64_t{load_as<int8_t>(p)});
    case ValueType::kI16:
      return static_cast<uint64_t>(int64_t{load_as<int16_t>(p)});
    case ValueType::kI32:
      return static_cast<uint64_t>(int64_t{load_as<int32_t>(p)});
    case ValueType::kI64:
      return load_as<uint64_t>(p);
    case ValueType::kU8:
      return load_as<uint8_t>(p);
    case ValueType::kU16:
      return load_as<uint16_t>(p);
    case ValueType::kU32:
      return load_as<uint32_t>(p);
    case ValueType::kU64:
      return load_as<uint64_t>(p);
    case ValueType::kF32:
      return std::bit_cast<uint64_t>(static_cast<double>(load_as<float>(p)));
    case ValueType::kF64:
      return load_as<uint64_t>(p);
  }
  return 0;
}

// What one aggregate slot does with a value (a record's or a partial's).
enum class Combine : uint8_t {
  kSumInt,  // wrapping 64-bit add: the same bits for signed and unsigned
  kSumFloat,
  kMinSigned,
  kMinUnsigned,
  kMinFloat,
  kMaxSigned,
  kMaxUnsigned,
  kMaxFloat,
};

// True if `v` should replace the held minimum `m`: v < m, or m is NaN and v
// is not, or both are zeros and only v is negative. This is a total order
// on non-NaN doubles, so the minimum does not depend on the order of values.
inline bool float_below(double v, double m) {
  if (v < m) return true;
  if (m != m) return v == v;
  return v == 0 && m == 0 && std::signbit(v) && !std::signbit(m);
}

inline void combine(Combine how, uint64_t& slot, uint64_t v) {
  switch (how) {
    case Combine::kSumInt:
      slot += v;
      return;
    case Combine::kSumFloat:
      slot = std::bit_cast<uint64_t>(std::bit_cast<double>(slot) + std::bit_cast<double>(v));
      return;
    case Combine::kMinSigned:
      if (static_cast<int64_t>(v) < static_cast<int64_t>(slot)) slot = v;
      return;
    case Combine::kMinUnsigned:
      if (v < slot) slot = v;
      return;
    case Combine::kMinFloat:
      if (float_below(std::bit_cast<double>(v), std::bit_cast<double>(slot))) slot = v;
      return;
    case Combine::kMaxSigned:
      if (static_cast<int64_t>(v) > static_cast<int64_t>(slot)) slot = v;
      return;
    case Combine::kMaxUnsigned:
      if (v > slot) slot = v;
      return;
    case Combine::kMaxFloat:
      if (float_below(-std::bit_cast<double>(v), -std::bit_cast<double>(slot))) slot = v;
      return;
  }
}

struct CombineField {
  uint32_t offset = 0;  // in the record
  ValueType type = ValueType::kI64;
  uint8_t aggs = 0;       // kAgg* bits
  int32_t sum_slot = -1;  // SUM and AVG share it; -1: none
  int32_t min_slot = -1;
  int32_t max_slot = -1;
};

// One step of folding a value into a group: read the field at `offset` as
// `type` (for a record; a partial holds it in `slot` already) and combine.
struct CombineOp {
  uint32_t offset = 0;
  ValueType type = ValueType::kI64;
  Combine how = Combine::kSumInt;
  uint32_t slot = 0;
};

struct CombineLayout {
  std::string name;          // the flow's, for messages
  std::string type_name;     // T's, for messages
  uint32_t record_size = 0;  // sizeof(T)
  bool has_key = false;
  uint32_t key_offset = 0;
  ValueType key_type = ValueType::kU64;
  bool count = false;  // count() was declared
  std::vector<CombineField> fields;
  // Derived by rebuild():
  std::vector<CombineOp> ops;      // every slot of every field, in slot order
  std::vector<uint64_t> identity;  // per slot: the value an empty group holds
  uint32_t slots = 0;
  uint32_t tag = 0;  // hash of describe(), carried by every partial

  // Adds `aggs` to the field at `offset`, declaring it as the next field if
  // it is new. Throws Error(kInvalidArgument) if that offset was declared
  // with another type.
  void declare_field(uint32_t offset, ValueType type, uint8_t aggs);
  void rebuild();
  // Throws Error(kInvalidArgument) naming what is missing.
  void validate() const;
  // "key u64@0; count; f0 i64@8 sum; f1 f64@16 min max avg".
  std::string describe() const;
  uint32_t partial_bytes() const;
  // The index of the declared field at `offset` of `type`; throws
  // Error(kInvalidArgument) if there is none ("what" names the caller).
  size_t field_index(uint32_t offset, ValueType type, const char* what) const;
  // The declared field `field`'s slot for `agg`; throws if it was not declared.
  uint32_t slot_of(size_t field, uint8_t agg) const;

  uint64_t key_of(const std::byte* rec) const { return load_value(rec + key_offset, key_type); }
};

}  // namespace sluice::detail
