// sluice/combiner.h: combiner flows. SUM, COUNT, MIN, MAX and AVG per group,
// pre-aggregated where the records are and merged where the groups live.
//
// A combiner flow has source endpoints that push records of a trivially
// copyable type T and target endpoints that end up with one final row per
// group: the group key, the number of records, and the declared aggregates of
// the declared value fields. N:1 (one target gets every group) and N:M (each
// group lands on exactly one target, chosen by a hash of its key) work alike.
//
//   struct Sale { uint64_t region; int64_t qty; double price; };
//   auto spec = sluice::combiner<Sale>("sales")
//                   .sources(cluster.all_ranks(2))
//                   .targets(cluster.ranks({0}))
//                   .group_by(&Sale::region)              // field 0: qty, field 1: price
//                   .sum(&Sale::qty).min(&Sale::price).max(&Sale::price).avg(&Sale::price).count()
//                   .local_groups(1 << 14);
//   spec.declare(cluster);                                // or cluster.declare(spec.flow())
//   // on a source thread:
//   sluice::CombinerSource<Sale> src(cluster, spec, slot);
//   if (src.push(sale) != sluice::Status::kOk) { ... src.error() ... }
//   if (src.close() != sluice::Status::kOk) { ... }
//   // on a target thread:
//   sluice::CombinerTarget<Sale> dst(cluster, spec, slot);
//   if (dst.collect(deadline) != sluice::Status::kOk) { ... dst.error() ... }
//   for (const sluice::Group& g : dst.result().groups())
//     use(g.key, g.count, g.sum(&Sale::qty), g.min(&Sale::price), g.avg(1));
//
// How it works: a combiner flow is a shuffle flow of byte records (see
// flow.h), each record one *partial aggregate* of one group, routed by a hash
// of the group key exactly as a typed shuffle flow routes a uint64_t key.
// A source folds every pushed record into a local open-addressing table of
// at most local_groups() groups. When a record of a new group finds the table
// full, the source pushes every partial in the table into the flow, clears
// the table and goes on; flush() and close() push what is left. A target
// merges the partials it receives into a table of its own (which grows) and,
// at end of flow, hands over the final groups sorted by key.
//
// Keys: group_by() names an integer (or enum) field of up to 8 bytes. Groups
// are identified and routed by its value converted to uint64_t
// (static_cast, so signed keys are sign-extended); static_cast<K>(g.key)
// gives the original back.
//
// Value fields and exactness:
// - Fields are integers of up to 8 bytes, float or double. They get indices
//   0, 1, ... in the order they are first named by sum/min/max/avg.
// - Integer SUM is computed in 64 bits, modulo 2^64 (signed fields as
//   int64_t, unsigned as uint64_t): an overflowing sum wraps, it is not
//   checked. Addition modulo 2^64 does not depend on order, so the result is
//   always bit-identical to a sequential (wrapping) sum over the same records,
//   and exact whenever the true sum fits 64 bits.
// - Floating SUM is computed in double (float values are widened exactly).
//   Partials are added in an order that depends on table fills and on
//   arrival, so a SUM differs from a sequential left-to-right double sum of
//   the same n = count values by summation order only: both are within
//   gamma(n-1) * S of the exact sum, where S is the sum of |x_i|,
//   gamma(k) = k*u / (1 - k*u) and u = 2^-53 (Higham, "Accuracy and Stability
//   of Numerical Algorithms", 4.2), so they differ by at most
//   2 * gamma(n-1) * S. For values of one sign that is a relative difference
//   of about 2.2e-16 * n. This is the documented tolerance.
// - AVG is SUM / COUNT as double (one more rounding); exact division of the
//   exact integer sum for integer fields whose sum and count are below 2^53.
// - MIN and MAX are exact for every type and bit-identical whatever the
//   order: -0.0 counts as below +0.0, and NaNs are ignored (as by std::fmin)
//   unless every value of the group is NaN, in which case the result is NaN.
//   A SUM or AVG over a NaN is NaN.
// - COUNT is always carried (AVG and the tables need it); count() declares
//   it for a combiner without value fields.
//
// Memory: a source's table holds at most local_groups() groups in
// 2 * bit_ceil(local_groups()) entries of 16 + 8 * slots bytes (slots: one
// per declared SUM-or-AVG, MIN and MAX of each field). A target's table
// grows with the groups routed to it (presize it with expected_groups()).
//
// Data plane: push() neither allocates, throws nor locks; when the table is
// full it pushes partials into the underlying flow, and may then wait for
// credit like Source::push. Every call that may wait takes a deadline and
// returns a Status: kPeerLost (a peer of the underlying flow is gone),
// kTimeout and kBackPressured come from the underlying flow, see flow.h.
// A target that receives a partial of a different layout (a participant that
// declared other fields or aggregates) fails with kInvalid and says so in
// error(): Cluster::declare compares the underlying flows, whose byte records
// cannot carry the layout, so this check happens on the first partial.
//
// Thread safety: a spec is a value. A CombinerSource or CombinerTarget is
// owned by one thread at a time (as Source and Target are); different ones
// are independent. A CombinerResult and its Groups are read-only values,
// safe to read from many threads.
//
// Ownership: sources and targets hold a Source/Target of the underlying flow
// and must be destroyed before the Cluster. A CombinerResult owns its rows;
// Groups point into it and live as long as it does (moving it keeps them
// valid).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/detail/hash.h"
#include "sluice/errors.h"
#include "sluice/flow.h"

namespace sluice {

// The form an aggregate is held in: int64_t, uint64_t or double.
enum class ValueKind : uint8_t { kSigned, kUnsigned, kFloat };

namespace detail {

// How a field's bytes are read.
enum class ValueType : uint8_t { kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kF32, kF64 };

template <class V>
constexpr ValueType value_type_of() {
  static_assert((std::is_integral_v<V> && sizeof(V) <= 8) || std::is_same_v<V, float> ||
                    std::is_same_v<V, double>,
                "combiner value fields are integers of up to 8 bytes, float or double");
  if constexpr (std::is_same_v<V, float>) {
    return ValueType::kF32;
  } else if constexpr (std::is_same_v<V, double>) {
    return ValueType::kF64;
  } else if constexpr (std::is_signed_v<V>) {
    return sizeof(V) == 1   ? ValueType::kI8
           : sizeof(V) == 2 ? ValueType::kI16
           : sizeof(V) == 4 ? ValueType::kI32
                            : ValueType::kI64;
  } else {
    return sizeof(V) == 1   ? ValueType::kU8
           : sizeof(V) == 2 ? ValueType::kU16
           : sizeof(V) == 4 ? ValueType::kU32
                            : ValueType::kU64;
  }
}

constexpr ValueKind kind_of(ValueType t) {
  return t <= ValueType::kI64   ? ValueKind::kSigned
         : t <= ValueType::kU64 ? ValueKind::kUnsigned
                                : ValueKind::kFloat;
}

// The type a SUM of a field of type V is held in.
template <class V>
using SumType = std::conditional_t<std::is_floating_point_v<V>, double,
                                   std::conditional_t<std::is_signed_v<V>, int64_t, uint64_t>>;

// Byte offset of `member` in T (T is trivially copyable, so this is its
// offsetof; the same probe flow.h's key() uses).
template <class T, class V>
uint32_t member_offset(V T::*member) {
  alignas(T) static const unsigned char probe[sizeof(T)] = {};
  const T* p = reinterpret_cast<const T*>(probe);
  return static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(&(p->*member)) - probe);
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

// Aggregates of one field, as a bit set.
inline constexpr uint8_t kAggSum = 1;
inline constexpr uint8_t kAggMin = 2;
inline constexpr uint8_t kAggMax = 4;
inline constexpr uint8_t kAggAvg = 8;

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

// What a combiner aggregates, derived from the spec's builder calls: the
// key, the fields with their aggregates, and from those the slot layout of
// a partial. Built at setup; read-only on the data path.
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

// A partial aggregate as a byte record of the underlying flow (which frames
// it with its own 4-byte length, so in a ring the key and every later word
// are 8-byte aligned):
//
//   0          4              12             20             20 + 8*slots
//   +----------+--------------+--------------+--------------+---
//   | tag u32  | key u64      | count u64    | slot[0] u64  | ... slot[slots-1]
//   +----------+--------------+--------------+--------------+---
//
// tag: CombineLayout::tag of the sender. count >= 1. slot i holds the
// aggregate of CombineLayout::ops[i] in its held form (int64_t, uint64_t or
// the bits of a double). Host byte order, like every record sluice moves.
inline constexpr uint32_t kPartialTagOffset = 0;
inline constexpr uint32_t kPartialKeyOffset = 4;
inline constexpr uint32_t kPartialCountOffset = 12;
inline constexpr uint32_t kPartialSlotsOffset = 20;
static_assert(kPartialKeyOffset + kRecordHeaderBytes == 8,
              "the key must be 8-byte aligned in a ring");
static_assert(kPartialSlotsOffset + kRecordHeaderBytes == 24,
              "slots must be 8-byte aligned in a ring");

// An open-addressing (linear probing) table of groups. Each entry is
// `stride` words: key, count (0: empty), then the layout's slots.
// Bounded (a source's local table: add() refuses a new group once
// max_groups are held) or growing (a target's table).
//
// Thread safety: one owning thread.
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

}  // namespace detail

// One aggregate of one group in its held form (int64_t, uint64_t or double).
class Value {
 public:
  Value() = default;
  Value(ValueKind kind, uint64_t bits) : kind_(kind), bits_(bits) {}
  ValueKind kind() const { return kind_; }
  // The held value converted to V by static_cast (exact when V is the
  // field's own type or the held form).
  template <class V>
  V as() const {
    switch (kind_) {
      case ValueKind::kSigned:
        return static_cast<V>(static_cast<int64_t>(bits_));
      case ValueKind::kUnsigned:
        return static_cast<V>(bits_);
      case ValueKind::kFloat:
        return static_cast<V>(std::bit_cast<double>(bits_));
    }
    return V{};
  }
  // The held bits: the int64_t or uint64_t, or the double's bit pattern.
  uint64_t bits() const { return bits_; }
  // Same kind and identical bits (so NaN == NaN, and -0.0 != +0.0).
  friend bool operator==(const Value&, const Value&) = default;

 private:
  ValueKind kind_ = ValueKind::kSigned;
  uint64_t bits_ = 0;
};

// The final aggregates of one group. Asking for an aggregate that was not
// declared for a field (or for a field that was not declared) throws
// Error(kInvalidArgument) naming it.
class Group {
 public:
  uint64_t key = 0;    // the group_by field as uint64_t; static_cast<K>(key) is the original
  uint64_t count = 0;  // records in the group, >= 1

  // By field index (0, 1, ... in order of first declaration).
  Value sum(size_t field) const { return value(field, detail::kAggSum); }
  Value min(size_t field) const { return value(field, detail::kAggMin); }
  Value max(size_t field) const { return value(field, detail::kAggMax); }
  // SUM / COUNT as double; REQUIRES the field was declared with avg() or sum().
  double avg(size_t field) const {
    return value(field, detail::kAggAvg).as<double>() / static_cast<double>(count);
  }

  // By member: SUM as int64_t, uint64_t or double (by the field's kind), MIN
  // and MAX in the field's own type (exact), AVG as double.
  template <class T, class V>
  detail::SumType<V> sum(V T::*m) const {
    return sum(field_of(m)).template as<detail::SumType<V>>();
  }
  template <class T, class V>
  V min(V T::*m) const {
    return min(field_of(m)).template as<V>();
  }
  template <class T, class V>
  V max(V T::*m) const {
    return max(field_of(m)).template as<V>();
  }
  template <class T, class V>
  double avg(V T::*m) const {
    return avg(field_of(m));
  }

 private:
  friend class CombinerResult;
  Value value(size_t field, uint8_t agg) const;
  template <class T, class V>
  size_t field_of(V T::*m) const {
    return layout_->field_index(detail::member_offset(m), detail::value_type_of<V>(), "Group");
  }

  const uint64_t* slots_ = nullptr;
  const detail::CombineLayout* layout_ = nullptr;
};

// The final groups of one target, sorted by key. Move-only.
class CombinerResult {
 public:
  CombinerResult() = default;
  CombinerResult(CombinerResult&&) noexcept = default;
  CombinerResult& operator=(CombinerResult&&) noexcept = default;
  CombinerResult(const CombinerResult&) = delete;
  CombinerResult& operator=(const CombinerResult&) = delete;

  std::span<const Group> groups() const { return groups_; }
  size_t size() const { return groups_.size(); }
  // The group with this key, or nullptr if this target has none.
  const Group* find(uint64_t key) const;

  // Takes the groups out of a target's table. Internal.
  static CombinerResult from_table(const detail::GroupTable& table);

 private:
  std::shared_ptr<const detail::CombineLayout> layout_;
  std::vector<uint64_t> slots_;  // layout.slots words per group, in groups_ order
  std::vector<Group> groups_;
};

// The description of a combiner flow over records of type T: the endpoints,
// the group key, the value fields and their aggregates, and the sources'
// local table size. Build it with combiner<T>(name); every participant must
// build the same one (see the note on layouts above).
template <class T>
class CombinerSpec {
  static_assert(std::is_trivially_copyable_v<T>, "combiner records must be trivially copyable");

 public:
  using Record = T;
  explicit CombinerSpec(std::string name) : flow_(name) {
    flow_.key(detail::kPartialKeyOffset, 8);
    layout_.name = std::move(name);
    layout_.type_name = typeid(T).name();
    layout_.record_size = sizeof(T);
    layout_.rebuild();
  }
  CombinerSpec& sources(std::vector<Endpoint> eps) {
    flow_.sources(std::move(eps));
    return *this;
  }
  CombinerSpec& targets(std::vector<Endpoint> eps) {
    num_targets_ = static_cast<uint32_t>(eps.size());
    flow_.targets(std::move(eps));
    return *this;
  }
  // The group key: an integer or enum field of up to 8 bytes.
  template <class K>
  CombinerSpec& group_by(K T::*member) {
    static_assert(std::is_integral_v<K> || std::is_enum_v<K>,
                  "the group key must be an integer or enum field");
    using I = typename std::conditional_t<std::is_enum_v<K>, std::underlying_type<K>,
                                          std::type_identity<K>>::type;
    layout_.has_key = true;
    layout_.key_offset = detail::member_offset(member);
    layout_.key_type = detail::value_type_of<I>();
    layout_.rebuild();
    return *this;
  }
  // Aggregates of a value field (an integer of up to 8 bytes, float or double).
  template <class V>
  CombinerSpec& sum(V T::*m) {
    return add(m, detail::kAggSum);
  }
  template <class V>
  CombinerSpec& min(V T::*m) {
    return add(m, detail::kAggMin);
  }
  template <class V>
  CombinerSpec& max(V T::*m) {
    return add(m, detail::kAggMax);
  }
  template <class V>
  CombinerSpec& avg(V T::*m) {
    return add(m, detail::kAggAvg);
  }
  // Declares COUNT (always carried; needed only when no value field is named).
  CombinerSpec& count() {
    layout_.count = true;
    layout_.rebuild();
    return *this;
  }
  // The most groups a source holds before it pushes its partials. Default 16384.
  CombinerSpec& local_groups(uint32_t n) {
    local_groups_ = n;
    return *this;
  }
  // Groups a target's table has room for before it first grows. Default 4096.
  CombinerSpec& expected_groups(uint32_t n) {
    expected_groups_ = n;
    return *this;
  }
  // The underlying flow's segment payload and ring depth (see flow.h).
  CombinerSpec& segment_bytes(uint32_t n) {
    flow_.segment_bytes(n);
    return *this;
  }
  CombinerSpec& ring_segments(uint32_t n) {
    flow_.ring_segments(n);
    return *this;
  }

  // The index Group::sum(size_t) etc. take for this field.
  template <class V>
  size_t field(V T::*m) const {
    return layout_.field_index(detail::member_offset(m), detail::value_type_of<V>(),
                               "CombinerSpec::field");
  }
  // The index into targets() of the target that owns group `key` (the key
  // as Group::key holds it): where every partial of that group is routed.
  uint32_t target_of(uint64_t key) const {
    return num_targets_ <= 1 ? 0 : detail::reduce(detail::mix64(key), num_targets_);
  }

  // Throws Error(kInvalidArgument) naming the first problem: no group key,
  // nothing to aggregate, a zero local table, endpoints, or partials too
  // large for a segment.
  void validate() const {
    layout_.validate();
    flow_.spec().validate();
    if (local_groups_ == 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "combiner '" + layout_.name + "': local_groups must be at least 1");
    }
    const size_t stride = detail::record_stride(layout_.partial_bytes());
    if (stride > flow_.spec().effective_segment_bytes()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "combiner '" + layout_.name + "': a partial of " + std::to_string(stride) +
                      " bytes does not fit a segment of " +
                      std::to_string(flow_.spec().effective_segment_bytes()) +
                      " bytes; raise segment_bytes");
    }
  }
  // The underlying shuffle flow of partials (validated), for Cluster::declare.
  const BytesShuffleSpec& flow() const {
    validate();
    return flow_;
  }
  // Declares the underlying flow: Cluster::declare(flow()), same rules.
  void declare(Cluster& cluster) const { cluster.declare(flow()); }

  const detail::CombineLayout& layout() const { return layout_; }
  uint32_t local_groups() const { return local_groups_; }
  uint32_t expected_groups() const { return expected_groups_; }

 private:
  template <class V>
  CombinerSpec& add(V T::*m, uint8_t agg) {
    layout_.declare_field(detail::member_offset(m), detail::value_type_of<V>(), agg);
    return *this;
  }

  BytesShuffleSpec flow_;
  detail::CombineLayout layout_;
  uint32_t num_targets_ = 0;
  uint32_t local_groups_ = 1u << 14;
  uint32_t expected_groups_ = 4096;
};

template <class T>
CombinerSpec<T> combiner(std::string name) {
  return CombinerSpec<T>(std::move(name));
}

namespace detail {

// The untyped half of a CombinerSource: its table and the partials it owes.
class CombinerSourceCore {
 public:
  CombinerSourceCore(std::shared_ptr<const CombineLayout> layout, size_t local_groups,
                     BytesSource out);

  // The fast path: folds `rec` into the table if it can without sending.
  bool try_add(const std::byte* rec) { return accepting_ && table_.add(rec); }
  // Everything else push() may have to do: send the full table's partials
  // (resuming where a previous call stopped), then fold `rec` in.
  Status push_slow(const std::byte* rec, Deadline deadline, bool try_only);
  Status flush(Deadline deadline);
  Status close(Deadline deadline);
  const std::string& error() const { return error_.empty() ? out_.error() : error_; }

  uint64_t table_flushes() const { return table_flushes_; }
  uint64_t partials_sent() const { return partials_sent_; }
  size_t local_size() const { return table_.size(); }

 private:
  // Sends the table's partials from cursor_ on, then clears it.
  Status drain(Deadline deadline, bool try_only);

  std::shared_ptr<const CombineLayout> layout_;
  GroupTable table_;
  BytesSource out_;
  std::vector<std::byte> partial_;  // one partial being built
  std::string error_;
  bool accepting_ = true;  // false while draining or once closed
  bool draining_ = false;
  bool closed_ = false;
  size_t cursor_ = 0;
  uint64_t table_flushes_ = 0;
  uint64_t partials_sent_ = 0;
};

// The untyped half of a CombinerTarget.
class CombinerTargetCore {
 public:
  CombinerTargetCore(std::shared_ptr<const CombineLayout> layout, size_t expected_groups,
                     BytesTarget in);

  Status poll();
  Status collect(Deadline deadline);
  const std::string& error() const { return error_.empty() ? in_.error() : error_; }
  bool done() const { return done_; }
  const CombinerResult& result() const { return result_; }
  CombinerResult take_result() { return std::move(result_); }
  uint64_t partials_merged() const { return partials_merged_; }

 private:
  // Merges one batch; kInvalid (error_ set) on a malformed partial.
  Status merge(const RecordBatch& batch);
  // Handles a consume() that returned nothing.
  Status settle(Status s);

  std::shared_ptr<const CombineLayout> layout_;
  GroupTable table_;
  BytesTarget in_;
  CombinerResult result_;
  std::string error_;
  Status failed_ = Status::kOk;
  bool done_ = false;
  uint64_t partials_merged_ = 0;
};

}  // namespace detail

// The sending end of a combiner flow for one endpoint. Move-only; one
// owning thread.
template <class T>
class CombinerSource {
 public:
  CombinerSource() = default;
  // Opens endpoint (cluster.rank(), slot) of a declared combiner flow.
  // REQUIRES: the endpoint is one of spec's sources, opened at most once.
  // Throws as Cluster::source does.
  CombinerSource(Cluster& cluster, const CombinerSpec<T>& spec, uint32_t slot)
      : CombinerSource(spec, cluster.source(spec.flow(), slot)) {}
  // Over an already opened source of spec.flow().
  CombinerSource(const CombinerSpec<T>& spec, BytesSource out)
      : core_(std::make_unique<detail::CombinerSourceCore>(
            std::make_shared<const detail::CombineLayout>(spec.layout()), spec.local_groups(),
            std::move(out))) {}

  // Folds `r` into its group. When the local table is full, first pushes
  // every partial it holds (waiting for credit as Source::push does). kOk:
  // `r` was taken. kTimeout, kPeerLost, kInvalid: `r` was not taken; after
  // kTimeout call again with the same record, it resumes. kClosed after close().
  [[nodiscard]] Status push(const T& r, Deadline deadline = kForever) {
    const auto* p = reinterpret_cast<const std::byte*>(&r);
    if (core_->try_add(p)) [[likely]]
      return Status::kOk;
    return core_->push_slow(p, deadline, false);
  }
  // As push, but never waits: kBackPressured (nothing taken) if a partial
  // found its target's ring full. Call again later with the same record.
  [[nodiscard]] Status try_push(const T& r) {
    const auto* p = reinterpret_cast<const std::byte*>(&r);
    if (core_->try_add(p)) [[likely]]
      return Status::kOk;
    return core_->push_slow(p, kForever, true);
  }
  // Pushes every partial held now and publishes them (Source::flush).
  [[nodiscard]] Status flush(Deadline deadline = kForever) { return core_->flush(deadline); }
  // Pushes what is left and closes the underlying source. Resumes after
  // kTimeout; idempotent.
  [[nodiscard]] Status close(Deadline deadline = kForever) { return core_->close(deadline); }
  // Why the last call failed (empty when nothing failed).
  const std::string& error() const { return core_->error(); }

  // Times the local table filled and its partials were pushed.
  uint64_t table_flushes() const { return core_->table_flushes(); }
  // Partials pushed so far (on fills, flush() and close()).
  uint64_t partials_sent() const { return core_->partials_sent(); }
  explicit operator bool() const { return core_ != nullptr; }

 private:
  std::unique_ptr<detail::CombinerSourceCore> core_;
};

// The receiving end of a combiner flow for one endpoint. Move-only; one
// owning thread.
template <class T>
class CombinerTarget {
 public:
  CombinerTarget() = default;
  // Opens endpoint (cluster.rank(), slot). REQUIRES: the endpoint is one of
  // spec's targets, opened at most once. Throws as Cluster::target does.
  CombinerTarget(Cluster& cluster, const CombinerSpec<T>& spec, uint32_t slot)
      : CombinerTarget(spec, cluster.target(spec.flow(), slot)) {}
  // Over an already opened target of spec.flow().
  CombinerTarget(const CombinerSpec<T>& spec, BytesTarget in)
      : core_(std::make_unique<detail::CombinerTargetCore>(
            std::make_shared<const detail::CombineLayout>(spec.layout()), spec.expected_groups(),
            std::move(in))) {}

  // Merges partials until every source has closed. kOk: result() holds the
  // final groups. kTimeout: call again, it resumes. kPeerLost, kInvalid:
  // see error(); the result is incomplete and never handed out.
  [[nodiscard]] Status collect(Deadline deadline = kForever) { return core_->collect(deadline); }
  // Merges what has arrived without waiting (for a thread that is also a
  // source of the flow). kOk: more may come. kEndOfFlow: done, as collect()
  // returning kOk. kPeerLost, kInvalid as for collect().
  [[nodiscard]] Status poll() { return core_->poll(); }
  // True once collect() returned kOk (or poll() kEndOfFlow).
  bool done() const { return core_->done(); }
  // The final groups. REQUIRES: done().
  const CombinerResult& result() const { return core_->result(); }
  // Moves the final groups out. REQUIRES: done().
  CombinerResult take_result() { return core_->take_result(); }
  const std::string& error() const { return core_->error(); }
  // Partials merged so far.
  uint64_t partials_merged() const { return core_->partials_merged(); }
  explicit operator bool() const { return core_ != nullptr; }

 private:
  std::unique_ptr<detail::CombinerTargetCore> core_;
};

}  // namespace sluice
