/// @file
/// sluice/combiner.h: combiner flows. SUM, COUNT, MIN, MAX and AVG per group,
/// pre-aggregated where the records are and merged where the groups live.
///
/// A combiner flow has source endpoints that push records of a trivially
/// copyable type T and target endpoints that end up with one final row per
/// group: the group key, the number of records, and the declared aggregates of
/// the declared value fields. N:1 (one target gets every group) and N:M (each
/// group lands on exactly one target, chosen by a hash of its key) work alike.
/// It is declared and opened like every other flow (see cluster.h):
///
/// @code
///   struct Sale { uint64_t region; int64_t qty; double price; };
///   auto spec = sluice::combiner<Sale>("sales")
///                   .sources(cluster.all_ranks(2))
///                   .targets(cluster.ranks({0}))
///                   .group_by(&Sale::region)              // field 0: qty, field 1: price
///                   .sum(&Sale::qty).min(&Sale::price).max(&Sale::price).avg(&Sale::price).count()
///                   .local_groups(1 << 14);
///   auto flow = cluster.declare(spec);                    // destroy it after src and dst
///   // on a source thread:
///   auto src = cluster.source(spec, slot);                // a Source<Combined<Sale>>
///   if (src.push(sale) != sluice::Status::kOk) { ... src.error() ... }
///   if (src.close() != sluice::Status::kOk) { ... }
///   // on a thread that is only a target:
///   auto dst = cluster.target(spec, slot);                // a Target<Combined<Sale>>
///   auto groups = dst.consume(deadline);                  // once every source closed
///   if (!groups) { ... groups.status(), dst.error() ... }
///   for (const sluice::Group& g : groups->groups())
///     use(g.key, g.count, g.sum(&Sale::qty), g.min(&Sale::price), g.avg(1));
/// @endcode
///
/// A thread that is a source and a target at once (endpoint (0, 0) above, or
/// of this flow and others) hands its combiner target to a Worker (worker.h)
/// and pushes and closes its sources through it, so that arriving partials
/// are merged while a push waits:
///
/// @code
///   sluice::Worker w;
///   w.add(cluster.target(spec, slot), [&](sluice::CombinerResult r) { result = std::move(r); });
///   auto src = cluster.source(spec, slot);
///   for (const Sale& s : sales) (void)w.push(src, s);    // real code checks each Status
///   (void)w.close(src);
///   if (w.run() != sluice::Status::kEndOfFlow) { ... w.error(0) ... }
/// @endcode
///
/// How it works: a combiner flow is a shuffle flow of byte records (see
/// flow.h), each record one *partial aggregate* of one group, routed by a hash
/// of the group key exactly as a typed shuffle flow routes a uint64_t key.
/// A source folds every pushed record into a local open-addressing table of
/// at most local_groups() groups. When a record of a new group finds the table
/// full, the source pushes every partial in the table into the flow, clears
/// the table and goes on; flush() and close() push what is left. A target
/// merges the partials it receives into a table of its own (which grows) and,
/// at end of flow, hands over the final groups sorted by key.
///
/// Keys: group_by() names an integer (or enum) field of up to 8 bytes. Groups
/// are identified and routed by its value converted to uint64_t
/// (static_cast, so signed keys are sign-extended); static_cast<K>(g.key)
/// gives the original back.
///
/// Value fields and exactness:
/// - Fields are integers of up to 8 bytes, float or double. They get indices
///   0, 1, ... in the order they are first named by sum/min/max/avg.
/// - Integer SUM is computed in 64 bits, modulo 2^64 (signed fields as
///   int64_t, unsigned as uint64_t): an overflowing sum wraps, it is not
///   checked. Addition modulo 2^64 does not depend on order, so the result is
///   always bit-identical to a sequential (wrapping) sum over the same records,
///   and exact whenever the true sum fits 64 bits.
/// - Floating SUM is computed in double (float values are widened exactly).
///   Partials are added in an order that depends on table fills and on
///   arrival, so a SUM differs from a sequential left-to-right double sum of
///   the same n = count values by summation order only: both are within
///   gamma(n-1) * S of the exact sum, where S is the sum of |x_i|,
///   gamma(k) = k*u / (1 - k*u) and u = 2^-53 (Higham, "Accuracy and Stability
///   of Numerical Algorithms", 4.2), so they differ by at most
///   2 * gamma(n-1) * S. For values of one sign that is a relative difference
///   of about 2.2e-16 * n. This is the documented tolerance.
/// - AVG is SUM / COUNT as double (one more rounding); exact division of the
///   exact integer sum for integer fields whose sum and count are below 2^53.
/// - MIN and MAX are exact for every type and bit-identical whatever the
///   order: -0.0 counts as below +0.0, and NaNs are ignored (as by std::fmin)
///   unless every value of the group is NaN, in which case the result is NaN.
///   A SUM or AVG over a NaN is NaN.
/// - COUNT is always carried (AVG and the tables need it); count() declares
///   it for a combiner without value fields.
///
/// Memory: a source's table holds at most local_groups() groups in
/// 2 * bit_ceil(local_groups()) entries of 16 + 8 * slots bytes (slots: one
/// per declared SUM-or-AVG, MIN and MAX of each field). A target's table
/// grows with the groups routed to it (presize it with expected_groups()).
///
/// Data plane: push() neither allocates, throws nor locks; when the table is
/// full it pushes partials into the underlying flow, and may then wait for
/// credit like Source::push. Every call that may wait takes a deadline and
/// returns a Status: kPeerLost (a peer of the underlying flow is gone),
/// kTimeout and kWouldBlock come from the underlying flow, see flow.h.
///
/// Layout agreement: Cluster::declare compares the participants' layouts
/// (group key, value fields and aggregates, in declaration order: they are
/// the flow's record type, see FlowSpec::type_name) and fails with
/// kSpecMismatch if they differ. Every partial also carries a hash of its
/// sender's layout; a target that receives one of another layout (from a
/// process that skipped the check) fails with kInvalid and says so in error().
///
/// Thread safety: a spec is a value. A combiner source or target is
/// owned by one thread at a time (as Source and Target are); different ones
/// are independent. A CombinerResult and its Groups are read-only values,
/// safe to read from many threads.
///
/// Ownership: sources and targets hold a source or target of the underlying
/// flow and must be destroyed before the Cluster. A CombinerResult owns its
/// rows; Groups point into it and live as long as it does (moving it keeps
/// them valid).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "sluice/detail/combiner_cores.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow.h"

SLUICE_API_BEGIN
namespace sluice {

/// The type a SUM of a field of type V is held in: double for a floating
/// point field, int64_t for a signed one, uint64_t for an unsigned one.
template <class V>
using SumType = std::conditional_t<std::is_floating_point_v<V>, double,
                                   std::conditional_t<std::is_signed_v<V>, int64_t, uint64_t>>;

/// The form an aggregate is held in: int64_t, uint64_t or double.
enum class ValueKind : uint8_t { kSigned, kUnsigned, kFloat };

class CombinerResult;

namespace detail {
// The ValueType of a field of `bytes` bytes held as `kind` (a run-time
// layout's, CombinerSpec<Bytes>), or nullopt if there is no such field type.
inline std::optional<ValueType> value_type_of(ValueKind kind, uint32_t bytes) {
  const bool s = kind == ValueKind::kSigned;
  switch (kind) {
    case ValueKind::kSigned:
    case ValueKind::kUnsigned:
      if (bytes == 1) return s ? ValueType::kI8 : ValueType::kU8;
      if (bytes == 2) return s ? ValueType::kI16 : ValueType::kU16;
      if (bytes == 4) return s ? ValueType::kI32 : ValueType::kU32;
      if (bytes == 8) return s ? ValueType::kI64 : ValueType::kU64;
      break;
    case ValueKind::kFloat:
      if (bytes == 4) return ValueType::kF32;
      if (bytes == 8) return ValueType::kF64;
      break;
  }
  return std::nullopt;
}
}  // namespace detail

/// One aggregate of one group in its held form (int64_t, uint64_t or double).
class Value {
 public:
  Value() = default;
  /// A value held as `kind` whose bits() are `bits`.
  Value(ValueKind kind, uint64_t bits) : kind_(kind), bits_(bits) {}
  /// The form it is held in.
  ValueKind kind() const { return kind_; }
  /// The held value converted to V by static_cast (exact when V is the
  /// field's own type or the held form).
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
  /// The held bits: the int64_t or uint64_t, or the double's bit pattern.
  uint64_t bits() const { return bits_; }
  /// Same kind and identical bits (so NaN == NaN, and -0.0 != +0.0).
  friend bool operator==(const Value&, const Value&) = default;

 private:
  ValueKind kind_ = ValueKind::kSigned;
  uint64_t bits_ = 0;
};

/// The final aggregates of one group. Asking for an aggregate that was not
/// declared for a field (or for a field that was not declared) throws
/// Error(kInvalidArgument) naming it.
class Group {
 public:
  uint64_t key = 0;    ///< the group_by field as uint64_t; static_cast<K>(key) is the original
  uint64_t count = 0;  ///< records in the group, >= 1

  /// By field index (0, 1, ... in order of first declaration).
  ///@{
  Value sum(size_t field) const { return value(field, detail::kAggSum); }
  Value min(size_t field) const { return value(field, detail::kAggMin); }
  Value max(size_t field) const { return value(field, detail::kAggMax); }
  ///@}
  /// SUM / COUNT as double; REQUIRES the field was declared with avg() or sum().
  double avg(size_t field) const {
    return value(field, detail::kAggAvg).as<double>() / static_cast<double>(count);
  }

  /// By member: SUM as int64_t, uint64_t or double (by the field's kind), MIN
  /// and MAX in the field's own type (exact), AVG as double.
  ///@{
  template <class T, class V>
  SumType<V> sum(V T::*m) const {
    return sum(field_of(m)).template as<SumType<V>>();
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
  ///@}

 private:
  friend CombinerResult detail::result_from_table(const detail::GroupTable&, uint64_t);
  Value value(size_t field, uint8_t agg) const;
  size_t field_index(uint32_t offset, detail::ValueType type) const;
  template <class T, class V>
  size_t field_of(V T::*m) const {
    return field_index(detail::member_offset(m), detail::value_type_of<V>());
  }

  const uint64_t* slots_ = nullptr;
  const detail::CombineLayout* layout_ = nullptr;
};

/// The final groups of one target, sorted by key. Move-only.
class CombinerResult {
 public:
  CombinerResult() = default;
  /// Moves the rows; the Groups move with them and stay valid.
  ///@{
  CombinerResult(CombinerResult&&) noexcept = default;
  CombinerResult& operator=(CombinerResult&&) noexcept = default;
  ///@}
  CombinerResult(const CombinerResult&) = delete;
  CombinerResult& operator=(const CombinerResult&) = delete;

  /// The groups, sorted by key.
  std::span<const Group> groups() const { return groups_; }
  /// How many groups there are.
  size_t size() const { return groups_.size(); }
  /// The group with this key, or nullptr if this target has none.
  const Group* find(uint64_t key) const;
  /// Partials merged into these groups (records pushed / partials is how
  /// much the sources' tables pre-aggregated).
  uint64_t partials() const { return partials_; }

 private:
  friend CombinerResult detail::result_from_table(const detail::GroupTable&, uint64_t);

  std::shared_ptr<const detail::CombineLayout> layout_;
  std::vector<uint64_t> slots_;  ///< layout.slots words per group, in groups_ order
  std::vector<Group> groups_;
  uint64_t partials_ = 0;
};

/// The description of a combiner flow over records of type T: the endpoints,
/// the group key, the value fields and their aggregates, and the sources'
/// local table size. Build it with combiner<T>(name); every participant must
/// build the same one (Cluster::declare checks).
template <class T>
class CombinerSpec : private detail::FlowBuilder<CombinerSpec<T>> {
  static_assert(std::is_trivially_copyable_v<T>, "combiner records must be trivially copyable");
  using Base = detail::FlowBuilder<CombinerSpec<T>>;
  friend Base;

 public:
  /// The setters every flow spec has (detail::FlowBuilder, flow_spec.h), of
  /// the underlying flow of partials: sources(), targets(), segment_bytes()
  /// and ring_segments().
  ///@{
  using Base::ring_segments;
  using Base::segment_bytes;
  using Base::sources;
  using Base::targets;
  ///@}
  /// The record type.
  using Record = T;
  /// A spec for combiner flow `name`; name its endpoints, its group key and
  /// its aggregates before it is declared.
  explicit CombinerSpec(std::string name)
      : core_(std::move(name), typeid(T).name(), static_cast<uint32_t>(sizeof(T))) {}
  /// The group key: an integer or enum field of up to 8 bytes.
  template <class K>
  CombinerSpec& group_by(K T::*member) {
    static_assert(std::is_integral_v<K> || std::is_enum_v<K>,
                  "the group key must be an integer or enum field");
    using I = typename std::conditional_t<std::is_enum_v<K>, std::underlying_type<K>,
                                          std::type_identity<K>>::type;
    core_.group_by(detail::member_offset(member), detail::value_type_of<I>());
    return *this;
  }
  /// Aggregates of a value field (an integer of up to 8 bytes, float or double).
  ///@{
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
  ///@}
  /// Declares COUNT (always carried; needed only when no value field is named).
  CombinerSpec& count() {
    core_.count();
    return *this;
  }
  /// The most groups a source holds before it pushes its partials. Default 16384.
  CombinerSpec& local_groups(uint32_t n) {
    core_.local_groups(n);
    return *this;
  }
  /// Groups a target's table has room for before it first grows. Default 4096.
  CombinerSpec& expected_groups(uint32_t n) {
    core_.expected_groups(n);
    return *this;
  }
  /// The index Group::sum(size_t) etc. take for this field.
  template <class V>
  size_t field(V T::*m) const {
    return core_.field(detail::member_offset(m), detail::value_type_of<V>(), "CombinerSpec::field");
  }
  /// The index into targets() of the target that owns group `key` (the key
  /// as Group::key holds it): where every partial of that group is routed.
  uint32_t target_of(uint64_t key) const { return core_.target_of(key); }
  /// The layout every participant must agree on, as text:
  /// "key u64@0; count; f0 i64@8 sum avg; f1 f64@16 min max avg".
  std::string describe() const { return core_.describe(); }
  /// Throws Error(kInvalidArgument) naming the first problem: no group key,
  /// nothing to aggregate, a zero local table, endpoints, or partials too
  /// large for a segment.
  void validate() const { core_.validate(); }
  /// The local_groups(n) set (default 16384).
  uint32_t local_groups() const { return core_.local_groups(); }
  /// The expected_groups(n) set (default 4096).
  uint32_t expected_groups() const { return core_.expected_groups(); }

  /// The flow it declares (a shuffle by the group key's hash, of partials).
  FlowSpec spec() const { return core_.flow_spec(); }
  /// The same, by conversion, so that Cluster::declare takes the spec as it
  /// is.
  operator FlowSpec() const { return core_.flow_spec(); }  // NOLINT(google-explicit-constructor)

 private:
  friend struct detail::CombinerSpecAccess;
  FlowSpec& mutable_flow_spec() { return core_.flow(); }
  template <class V>
  CombinerSpec& add(V T::*m, uint8_t agg) {
    core_.add(detail::member_offset(m), detail::value_type_of<V>(), agg);
    return *this;
  }

  detail::CombinerSpecCore core_;
};

/// A CombinerSpec<T> for combiner flow `name`, to chain setters on.
template <class T>
CombinerSpec<T> combiner(std::string name) {
  return CombinerSpec<T>(std::move(name));
}

/// A combiner flow over records whose layout is known only at run time (a
/// numpy structured dtype, a row format read from a file): records of
/// record_bytes() bytes, the group key and the value fields named by byte
/// offset, held form and size. It is the same flow as a CombinerSpec<T> of
/// the same layout: typed and untyped participants of one flow agree at
/// declare. Its ends are a Source<Combined<Bytes>>, which takes whole
/// records as bytes, and a Target<Combined<Bytes>> (the groups, by field
/// index: Group::sum(0), ...). A Worker does not take them (push and
/// consume from one thread each).
template <>
class CombinerSpec<Bytes> : private detail::FlowBuilder<CombinerSpec<Bytes>> {
  using Base = detail::FlowBuilder<CombinerSpec<Bytes>>;
  friend Base;

 public:
  /// The setters every flow spec has, of the underlying flow of partials.
  ///@{
  using Base::ring_segments;
  using Base::segment_bytes;
  using Base::sources;
  using Base::targets;
  ///@}
  /// The record type.
  using Record = Bytes;
  /// A spec for combiner flow `name` over records of `record_bytes` bytes.
  CombinerSpec(std::string name, uint32_t record_bytes)
      : core_(name, "bytes", record_bytes), name_(std::move(name)), record_bytes_(record_bytes) {}
  /// The group key: an integer field (kSigned or kUnsigned) of 1, 2, 4 or 8
  /// bytes at byte `offset`. Throws Error(kInvalidArgument) if there is no
  /// such field type or the field does not lie inside the record.
  CombinerSpec& group_by(uint32_t offset, ValueKind kind, uint32_t bytes) {
    if (kind == ValueKind::kFloat) {
      throw Error(ErrorCode::kInvalidArgument,
                  where("group_by", offset) + ": the group key must be an integer field");
    }
    core_.group_by(offset, type_at(offset, kind, bytes, "group_by"));
    return *this;
  }
  /// Aggregates of a value field at byte `offset`: an integer of 1, 2, 4
  /// or 8 bytes, or a float of 4 or 8. Throws as group_by.
  ///@{
  CombinerSpec& sum(uint32_t offset, ValueKind kind, uint32_t bytes) {
    return add(offset, kind, bytes, detail::kAggSum, "sum");
  }
  CombinerSpec& min(uint32_t offset, ValueKind kind, uint32_t bytes) {
    return add(offset, kind, bytes, detail::kAggMin, "min");
  }
  CombinerSpec& max(uint32_t offset, ValueKind kind, uint32_t bytes) {
    return add(offset, kind, bytes, detail::kAggMax, "max");
  }
  CombinerSpec& avg(uint32_t offset, ValueKind kind, uint32_t bytes) {
    return add(offset, kind, bytes, detail::kAggAvg, "avg");
  }
  ///@}
  /// As CombinerSpec<T>: COUNT, the sources' and targets' table sizes.
  ///@{
  CombinerSpec& count() {
    core_.count();
    return *this;
  }
  CombinerSpec& local_groups(uint32_t n) {
    core_.local_groups(n);
    return *this;
  }
  CombinerSpec& expected_groups(uint32_t n) {
    core_.expected_groups(n);
    return *this;
  }
  ///@}
  /// The index Group::sum(size_t) etc. take for the field at `offset`.
  size_t field(uint32_t offset, ValueKind kind, uint32_t bytes) const {
    return core_.field(offset, type_at(offset, kind, bytes, "field"), "CombinerSpec::field");
  }
  /// Bytes per record.
  uint32_t record_bytes() const { return record_bytes_; }
  /// As CombinerSpec<T>.
  ///@{
  uint32_t target_of(uint64_t key) const { return core_.target_of(key); }
  std::string describe() const { return core_.describe(); }
  void validate() const { core_.validate(); }
  uint32_t local_groups() const { return core_.local_groups(); }
  uint32_t expected_groups() const { return core_.expected_groups(); }
  FlowSpec spec() const { return core_.flow_spec(); }
  operator FlowSpec() const {
    return core_.flow_spec();
  }  // NOLINT(google-explicit-constructor)
     ///@}

 private:
  friend struct detail::CombinerSpecAccess;
  FlowSpec& mutable_flow_spec() { return core_.flow(); }
  std::string where(const char* call, uint32_t offset) const {
    return "combiner '" + name_ + "' " + call + "(offset " + std::to_string(offset) + ")";
  }
  detail::ValueType type_at(uint32_t offset, ValueKind kind, uint32_t bytes,
                            const char* call) const {
    const std::optional<detail::ValueType> type = detail::value_type_of(kind, bytes);
    if (!type) {
      throw Error(ErrorCode::kInvalidArgument,
                  where(call, offset) + ": no field type of " + std::to_string(bytes) +
                      " bytes held as " +
                      (kind == ValueKind::kFloat ? "floating point" : "an integer") +
                      " (integers of 1, 2, 4 or 8 bytes, floats of 4 or 8)");
    }
    if (uint64_t{offset} + bytes > record_bytes_) {
      throw Error(ErrorCode::kInvalidArgument, where(call, offset) + ": a field of " +
                                                   std::to_string(bytes) +
                                                   " bytes there does not lie inside the " +
                                                   std::to_string(record_bytes_) + "-byte record");
    }
    return *type;
  }
  CombinerSpec& add(uint32_t offset, ValueKind kind, uint32_t bytes, uint8_t agg,
                    const char* call) {
    core_.add(offset, type_at(offset, kind, bytes, call), agg);
    return *this;
  }

  detail::CombinerSpecCore core_;
  std::string name_;
  uint32_t record_bytes_ = 0;
};

/// A CombinerSpec<Bytes> for combiner flow `name` over records of
/// `record_bytes` bytes, to chain setters on.
inline CombinerSpec<Bytes> combiner(std::string name, uint32_t record_bytes) {
  return CombinerSpec<Bytes>(std::move(name), record_bytes);
}

class Worker;

/// The record parameter of a combiner flow's ends: a combiner flow of
/// records T (CombinerSpec<T>) has a Source<Combined<T>>, which folds the
/// records into its groups, and a Target<Combined<T>>, which merges them:
/// the same Source and Target as every flow's, T wrapped.
template <class T>
struct Combined {
  /// The records folded.
  using Record = T;
};

/// The sending end of a combiner flow for one endpoint, from
/// Cluster::source(spec, slot). Move-only; one owning thread.
///
/// Lifecycle: push ... then close() for the guarantee (every record pushed is
/// in exactly one final group), or abort() to end without it. Destroying a
/// source that was not closed discards the partials its table holds and
/// behaves as Source's destructor does without close(): its targets learn
/// that the flow is incomplete (kPeerLost).
template <class T>
class Source<Combined<T>> {
 public:
  Source() = default;

  /// Folds `r` into its group. When the local table is full, first pushes
  /// every partial it holds (waiting for credit as Source::push does). kOk:
  /// `r` was taken. kTimeout, kPeerLost, kInvalid: `r` was not taken; after
  /// kTimeout call again with the same record, it resumes. kClosed after
  /// close() or abort().
  [[nodiscard]] Status push(const T& r, Deadline deadline = kForever) {
    return last_ = core_->push(reinterpret_cast<const std::byte*>(&r), deadline, false);
  }
  /// As push, but never waits: kWouldBlock (nothing taken) if a partial
  /// found its target's ring full. Call again later with the same record
  /// (or push it through a Worker, which waits for you).
  [[nodiscard]] Status try_push(const T& r) {
    return last_ = core_->push(reinterpret_cast<const std::byte*>(&r), kForever, true);
  }
  /// Pushes every partial held now and publishes them (Source::flush).
  [[nodiscard]] Status flush(Deadline deadline = kForever) {
    return last_ = core_->flush(deadline);
  }
  /// Pushes what is left and closes the underlying source. Resumes after
  /// kTimeout (nothing is sent twice); idempotent.
  [[nodiscard]] Status close(Deadline deadline = kForever) {
    return last_ = core_->close(deadline);
  }
  /// close(), then waits until every target confirmed it has every partial
  /// (Source::close_and_wait).
  [[nodiscard]] Status close_and_wait(Deadline deadline = kForever) {
    if (Status s = core_->close(deadline); s != Status::kOk) return last_ = s;
    return last_ = core_->flow_source()->wait_delivered(deadline);
  }
  /// Ends this source without the guarantee (Source::abort): what its table
  /// holds is dropped, and its targets learn at once that the flow is
  /// incomplete. Later calls return kClosed.
  void abort() {
    if (core_) core_->abort();
  }
  /// Why the last call failed; empty after kOk (as Source::error).
  const std::string& error() const { return detail::error_text(last_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known
  /// (as Source::lost_peer).
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }

  /// Times the local table filled and its partials were pushed.
  uint64_t table_flushes() const { return core_->table_flushes(); }
  /// Partials pushed so far (on fills, flush() and close()).
  uint64_t partials_sent() const { return core_->partials_sent(); }
  /// False for a default-constructed or moved-from source.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  // Sources come from Cluster::source (or detail::combiner_source_from_core).
  friend Source detail::combiner_source_from_core<T>(
      std::unique_ptr<detail::CombinerSourceCore> core);
  explicit Source(std::unique_ptr<detail::CombinerSourceCore> core) : core_(std::move(core)) {}

  friend class Worker;
  std::unique_ptr<detail::CombinerSourceCore> core_;
  Status last_ = Status::kOk;
};

namespace detail {
template <class T>
Source<Combined<T>> combiner_source_from_core(std::unique_ptr<CombinerSourceCore> core) {
  return Source<Combined<T>>(std::move(core));
}
}  // namespace detail

/// The sending end of a combiner flow of run-time records
/// (CombinerSpec<Bytes>): as Source<Combined<T>>, records given as bytes.
template <>
class Source<Combined<Bytes>> {
 public:
  Source() = default;

  /// Folds `records` (whole records of the spec's record_bytes() each, back
  /// to back) into their groups, in order. kOk: every record was taken.
  /// kInvalid (nothing taken) if the size is not a multiple of the record
  /// size. kTimeout, kPeerLost: last_pushed() records were taken; after
  /// kTimeout push the rest. kClosed after close() or abort().
  [[nodiscard]] Status push(std::span<const std::byte> records, Deadline deadline = kForever) {
    pushed_ = 0;
    if (records.size() % record_bytes_ != 0) {
      bad_size_ = "a push of " + std::to_string(records.size()) +
                  " bytes is not whole records of " + std::to_string(record_bytes_) + " bytes";
      return last_ = Status::kInvalid;
    }
    for (size_t at = 0; at < records.size(); at += record_bytes_, ++pushed_) {
      if (Status s = core_->push(records.data() + at, deadline, false); s != Status::kOk)
        return last_ = s;
    }
    return last_ = Status::kOk;
  }
  /// Records the last push() took.
  size_t last_pushed() const { return pushed_; }
  /// As Source<Combined<T>>.
  ///@{
  [[nodiscard]] Status flush(Deadline deadline = kForever) {
    return last_ = core_->flush(deadline);
  }
  [[nodiscard]] Status close(Deadline deadline = kForever) {
    return last_ = core_->close(deadline);
  }
  void abort() {
    if (core_) core_->abort();
  }
  const std::string& error() const {
    if (last_ == Status::kInvalid && !bad_size_.empty()) return bad_size_;
    return detail::error_text(last_, core_->error());
  }
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  uint64_t partials_sent() const { return core_->partials_sent(); }
  explicit operator bool() const { return core_ != nullptr; }
  ///@}

 private:
  friend Source detail::combiner_source_from_core<Bytes>(
      std::unique_ptr<detail::CombinerSourceCore> core);
  explicit Source(std::unique_ptr<detail::CombinerSourceCore> core)
      : core_(std::move(core)), record_bytes_(core_->record_bytes()) {}

  std::unique_ptr<detail::CombinerSourceCore> core_;
  uint32_t record_bytes_ = 1;
  size_t pushed_ = 0;
  Status last_ = Status::kOk;
  std::string bad_size_;
};

/// The receiving end of a combiner flow for one endpoint, from
/// Cluster::target(spec, slot). Move-only; one owning thread. A thread that
/// also pushes gives it to a Worker instead of calling collect() (worker.h).
template <class T>
class Target<Combined<T>> {
 public:
  Target() = default;

  /// As Target::consume, for a combiner: merges partials until every source
  /// has closed (collect()), then returns the final groups, once; later
  /// calls return kEndOfFlow, as a typed target's at the end of its flow.
  /// kTimeout: call again, it resumes. kPeerLost, kInvalid: see error().
  Result<CombinerResult> consume(Deadline deadline = kForever) {
    if (taken_) return Status::kEndOfFlow;
    if (Status s = core_->collect(deadline); s != Status::kOk) return s;
    taken_ = true;
    return std::move(core_->result());
  }
  /// Merges partials until every source has closed. kOk: result() holds the
  /// final groups (again kOk on later calls). kTimeout: call again, it
  /// resumes. kPeerLost, kInvalid: see error(); the result is incomplete and
  /// never handed out, and later calls return the same status.
  [[nodiscard]] Status collect(Deadline deadline = kForever) { return core_->collect(deadline); }
  /// True once collect() returned kOk.
  bool done() const { return core_->done(); }
  /// The final groups. REQUIRES: done().
  const CombinerResult& result() const { return core_->result(); }
  /// Moves the final groups out. REQUIRES: done().
  CombinerResult take_result() { return std::move(core_->result()); }
  /// Why collect() did not return kOk: a malformed partial or one of another
  /// layout, or else the underlying flow's reason (as Target::error).
  const std::string& error() const { return core_->error(); }
  /// After kPeerLost: the rank (and host) it is about, where one is known
  /// (as Target::lost_peer).
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// Partials merged so far.
  uint64_t partials_merged() const { return core_->partials_merged(); }
  /// False for a default-constructed or moved-from target.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  // Targets come from Cluster::target (or detail::combiner_target_from_core).
  friend Target detail::combiner_target_from_core<T>(
      std::unique_ptr<detail::CombinerTargetCore> core);
  explicit Target(std::unique_ptr<detail::CombinerTargetCore> core) : core_(std::move(core)) {}

  friend class Worker;
  std::unique_ptr<detail::CombinerTargetCore> core_;
  bool taken_ = false;  // consume() handed the result out
};

namespace detail {
template <class T>
Target<Combined<T>> combiner_target_from_core(std::unique_ptr<CombinerTargetCore> core) {
  return Target<Combined<T>>(std::move(core));
}
}  // namespace detail

/// The 1.0 names of the combiner ends, kept for existing code.
///@{
template <class T>
using CombinerSource [[deprecated("use sluice::Source<sluice::Combined<T>>")]] =
    Source<Combined<T>>;
template <class T>
using CombinerTarget [[deprecated("use sluice::Target<sluice::Combined<T>>")]] =
    Target<Combined<T>>;
///@}

}  // namespace sluice
SLUICE_API_END
