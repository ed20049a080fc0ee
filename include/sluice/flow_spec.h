/// @file
/// sluice/flow_spec.h: how a flow is described. One spec per kind of flow,
/// for records of a trivially copyable type T or for byte records (Bytes):
/// ShuffleSpec (each record to one target: by a hash of the record or a key,
/// a function of the record, or named by the caller) and ReplicateSpec (each
/// record to every target; optionally in one global order). combiner.h adds
/// CombinerSpec. A spec is a value: build it with shuffle<T>(name) or
/// replicate<T>(name) and chained setters, give it to Cluster::declare on
/// every participating rank, and open this rank's ends of the flow with
/// Cluster::source and Cluster::target (flow.h).
///
/// Thread safety: a spec is a value (copy it freely).
#pragma once

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "sluice/export.h"
#include "sluice/hash.h"

SLUICE_API_BEGIN
namespace sluice {

/// One worker thread of one process: the unit a flow sends from and to.
struct Endpoint {
  uint32_t rank = 0;  ///< the process: its rank in the job
  uint32_t slot = 0;  ///< the thread: its index among its rank's endpoints, from 0
  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
};

/// Bandwidth batches records into segments (default 8 KiB) that are published
/// when full or on flush(); Latency publishes every record at once in a segment
/// of its own and has consumers spin before they park.
enum class Optimize : uint8_t { kBandwidth, kLatency };

/// Whether each record goes to one target (kShuffle) or to every target
/// (kReplicate).
enum class FlowType : uint8_t { kShuffle, kReplicate };

namespace detail {
class FlowSpecAccess;
}  // namespace detail

/// The untyped description of a flow, as the registry and transports see it.
/// Users build one with shuffle<T>() or replicate<T>() and read it through
/// the accessors below; only the builders (and the library) write it.
class FlowSpec {
 public:
  /// The name the flow is declared and opened by: 1 to 200 bytes, no
  /// newline, NUL or '='.
  const std::string& name() const { return name_; }
  /// Shuffle or replicate.
  FlowType type() const { return type_; }
  /// Bytes per record; 0: variable-length byte records.
  uint32_t record_size() const { return record_size_; }
  /// alignof the record type.
  uint32_t record_align() const { return record_align_; }
  /// The record type's identity, compared at declare with its size and
  /// alignment: typeid(T).name() by default (the same in every process built
  /// from the same sources), "bytes" for byte records; set it with
  /// type_tag() when processes built differently share a flow.
  const std::string& type_name() const { return type_name_; }
  /// The endpoints that push into the flow; no endpoint twice.
  const std::vector<Endpoint>& sources() const { return sources_; }
  /// The endpoints that consume from it; no endpoint twice.
  const std::vector<Endpoint>& targets() const { return targets_; }
  /// How a record's target is chosen: a hash of the whole record (the
  /// default), of a key (kHashKey), a function (kFunction), or named by the
  /// caller (kExplicit; every replicate flow). The builders set it.
  Route route() const { return route_; }
  /// kHashKey: where the key lives in a record.
  uint32_t key_offset() const { return key_offset_; }
  /// kHashKey: the key's size in bytes.
  uint32_t key_size() const { return key_size_; }
  /// kFunction: the function that picks a record's target.
  const RouteFunction& route_fn() const { return route_fn_; }
  /// Bandwidth (the default) or Latency; see Optimize.
  Optimize optimize() const { return optimize_; }
  /// Payload per segment as set; 0: 8 KiB (Bandwidth), one record (Latency).
  uint32_t segment_bytes() const { return segment_bytes_; }
  /// Segments per ring as set; 0: 16 (Bandwidth), 64 (Latency). An ordered
  /// Bandwidth flow with a target on another host, whose sources number half
  /// a ring at a time with one remote fetch-and-add, gets enough for 512 KiB
  /// (64 segments of the default 8 KiB; never fewer than 16).
  uint32_t ring_segments() const { return ring_segments_; }
  /// Replicate flows only: one global order for all targets (see above), and
  /// how long a target waits for a missing sequence number before it reports
  /// a gap (as set; 0: 2000 ms).
  ///@{
  bool ordered() const { return ordered_; }
  uint32_t gap_timeout_ms() const { return gap_timeout_ms_; }
  ///@}
  /// Ordered flows: the rank that owns the sequencer, as set; kNoRank: the
  /// first target's. effective_sequencer_rank() applies the default.
  uint32_t sequencer_rank() const { return sequencer_rank_; }
  /// The rank that owns an ordered flow's sequencer after the default.
  uint32_t effective_sequencer_rank() const {
    return sequencer_rank_ != kNoRank || targets_.empty() ? sequencer_rank_ : targets_[0].rank;
  }
  /// Ordered flows: how long (ms) a source waits for a target's ring to
  /// have room before that target misses segments; 0 (the default): it
  /// waits as long as its push allows, holding every target back.
  uint32_t skip_full_ms() const { return skip_full_ms_; }
  /// "No rank set" (sequencer_rank()).
  static constexpr uint32_t kNoRank = 0xffffffffu;

  /// Throws Error(kInvalidArgument) naming the first problem: empty name, no
  /// sources or targets, a duplicate endpoint, a key outside the record, ...
  void validate() const;
  /// Payload bytes per segment after defaults are applied.
  uint32_t effective_segment_bytes() const;
  /// Segments per ring after defaults are applied.
  uint32_t effective_ring_segments() const;
  /// The same, for a flow of which some (source, target) pair goes over ofi:
  /// an ordered Bandwidth flow's default ring then holds at least 512 KiB.
  uint32_t effective_ring_segments(bool over_ofi) const;
  /// The gap timeout after the default (2000 ms) is applied.
  uint32_t effective_gap_timeout_ms() const {
    return gap_timeout_ms_ != 0 ? gap_timeout_ms_ : 2000;
  }
  /// Bytes at the start of every segment's payload that carry its sequence
  /// number (ordered replicate flows: 8, or the record alignment if that is
  /// larger, so records after it stay aligned), or 0.
  uint32_t segment_prefix_bytes() const {
    return ordered_ ? (record_align_ > 8 ? record_align_ : 8) : 0;
  }
  /// The largest record push() takes: record_size for typed flows; for byte
  /// records, what fits one segment with its 4-byte length and padding to 8:
  /// segment_bytes - 4, rounded down to a multiple of 8 first, less 8 on an
  /// ordered flow. push() of a larger one returns kInvalid naming this limit.
  uint32_t max_record_bytes() const;
  /// The "field=value" lines every participant must agree on (one per line,
  /// fixed order); the registry compares these and names fields that differ.
  std::string canonical() const;

 private:
  friend class detail::FlowSpecAccess;

  std::string name_;
  FlowType type_ = FlowType::kShuffle;
  uint32_t record_size_ = 0;
  uint32_t record_align_ = 1;
  std::string type_name_;
  std::vector<Endpoint> sources_;
  std::vector<Endpoint> targets_;
  Route route_ = Route::kHashRecord;
  uint32_t key_offset_ = 0;
  uint32_t key_size_ = 0;
  RouteFunction route_fn_;
  Optimize optimize_ = Optimize::kBandwidth;
  uint32_t segment_bytes_ = 0;
  uint32_t ring_segments_ = 0;
  bool ordered_ = false;
  uint32_t gap_timeout_ms_ = 0;
  uint32_t sequencer_rank_ = kNoRank;
  uint32_t skip_full_ms_ = 0;
};

namespace detail {

/// The one way to write a FlowSpec's fields: the builders below, combiner.h's
/// CombinerSpecCore and the library's own code (decoding a spec, adjusting a
/// copy) take a mutable reference to a field by its name, e.g.
/// `FlowSpecAccess::sources(spec) = eps`. Not for users: build specs with
/// shuffle<T>() or replicate<T>().
class FlowSpecAccess {
 public:
  static std::string& name(FlowSpec& s) { return s.name_; }
  static FlowType& type(FlowSpec& s) { return s.type_; }
  static uint32_t& record_size(FlowSpec& s) { return s.record_size_; }
  static uint32_t& record_align(FlowSpec& s) { return s.record_align_; }
  static std::string& type_name(FlowSpec& s) { return s.type_name_; }
  static std::vector<Endpoint>& sources(FlowSpec& s) { return s.sources_; }
  static std::vector<Endpoint>& targets(FlowSpec& s) { return s.targets_; }
  static Route& route(FlowSpec& s) { return s.route_; }
  static uint32_t& key_offset(FlowSpec& s) { return s.key_offset_; }
  static uint32_t& key_size(FlowSpec& s) { return s.key_size_; }
  static RouteFunction& route_fn(FlowSpec& s) { return s.route_fn_; }
  static Optimize& optimize(FlowSpec& s) { return s.optimize_; }
  static uint32_t& segment_bytes(FlowSpec& s) { return s.segment_bytes_; }
  static uint32_t& ring_segments(FlowSpec& s) { return s.ring_segments_; }
  static bool& ordered(FlowSpec& s) { return s.ordered_; }
  static uint32_t& gap_timeout_ms(FlowSpec& s) { return s.gap_timeout_ms_; }
  static uint32_t& sequencer_rank(FlowSpec& s) { return s.sequencer_rank_; }
  static uint32_t& skip_full_ms(FlowSpec& s) { return s.skip_full_ms_; }
};

}  // namespace detail

/// The record type of a flow of variable-length byte records: ShuffleSpec<Bytes>,
/// ReplicateSpec<Bytes>, and the Source<Bytes> and Target<Bytes> they open
/// (flow.h). A tag, never constructed: a record is a std::span<const std::byte>.
struct Bytes;

// Spec builders. One spec per flow kind (ShuffleSpec, ReplicateSpec and
// combiner.h's CombinerSpec), for typed records or Bytes. The setters all
// kinds share (endpoints, segment size and ring depth; record flows also
// type_tag and optimize) are written once in detail::FlowBuilder /
// detail::RecordFlowBuilder, and each kind adds its own (shuffle: key, route,
// explicit_targets; replicate: ordered, gap_timeout; combiner.h: group_by and
// the aggregates). The specs inherit them privately and name each setter
// with a using-declaration, so no detail type is part of their interface.
// Every setter returns the spec itself, so calls chain in any order:
//   sluice::shuffle<T>("x").sources(...).targets(...).key(&T::k).segment_bytes(4096)
namespace detail {

/// The setters every flow kind has. `Derived` provides
/// `FlowSpec& mutable_flow_spec()`, the spec the setters fill in.
template <class Derived>
class FlowBuilder {
 public:
  /// The endpoints that push into the flow.
  Derived& sources(std::vector<Endpoint> eps) {
    FlowSpecAccess::sources(flow()) = std::move(eps);
    return self();
  }
  /// The endpoints that consume from it.
  Derived& targets(std::vector<Endpoint> eps) {
    FlowSpecAccess::targets(flow()) = std::move(eps);
    return self();
  }
  /// Payload bytes per segment (Bandwidth mode); a multiple of 64 is best.
  Derived& segment_bytes(uint32_t n) {
    FlowSpecAccess::segment_bytes(flow()) = n;
    return self();
  }
  /// Segments per (source, target) ring: the most a source runs ahead.
  Derived& ring_segments(uint32_t n) {
    FlowSpecAccess::ring_segments(flow()) = n;
    return self();
  }

 protected:
  FlowBuilder() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  FlowSpec& flow() { return self().mutable_flow_spec(); }
};

/// A builder that owns its FlowSpec: the shuffle and replicate kinds, typed
/// or of Bytes.
template <class Derived>
class RecordFlowBuilder : public FlowBuilder<Derived> {
 public:
  /// Names the record type for the check at declare (see FlowSpec::type_name).
  Derived& type_tag(std::string tag) {
    FlowSpecAccess::type_name(spec_) = std::move(tag);
    return static_cast<Derived&>(*this);
  }
  Derived& optimize(Optimize o) {
    FlowSpecAccess::optimize(spec_) = o;
    return static_cast<Derived&>(*this);
  }
  /// The untyped spec, as Cluster::declare takes it.
  const FlowSpec& spec() const { return spec_; }
  /// A spec converts to the untyped spec it holds, so that Cluster::declare
  /// takes every kind of spec as it is.
  operator const FlowSpec&() const { return spec_; }  // NOLINT(google-explicit-constructor)

 protected:
  /// record_size 0: byte records (type name "bytes").
  RecordFlowBuilder(std::string name, FlowType type, uint32_t record_size, uint32_t record_align,
                    std::string type_name) {
    FlowSpecAccess::name(spec_) = std::move(name);
    FlowSpecAccess::type(spec_) = type;
    FlowSpecAccess::record_size(spec_) = record_size;
    FlowSpecAccess::record_align(spec_) = record_align;
    FlowSpecAccess::type_name(spec_) = std::move(type_name);
    if (type == FlowType::kReplicate) FlowSpecAccess::route(spec_) = Route::kExplicit;
  }
  FlowSpec& mutable_flow_spec() { return spec_; }
  FlowSpec spec_;

 private:
  friend class FlowBuilder<Derived>;
};

/// What a typed flow's records must be.
template <class T>
constexpr bool check_record_type() {
  static_assert(std::is_trivially_copyable_v<T>, "flow records must be trivially copyable");
  static_assert(sizeof(T) > 0);
  return true;
}

/// What a flow of T records in its FlowSpec: the record's size and
/// alignment and the name compared at declare; for Bytes, size 0 (byte
/// records of any length), alignment 1 and "bytes".
template <class T>
struct RecordShape {
  static constexpr bool kValid = check_record_type<T>();
  static constexpr uint32_t kSize = sizeof(T);
  static constexpr uint32_t kAlign = alignof(T);
  static const char* name() { return typeid(T).name(); }
};
template <>
struct RecordShape<Bytes> {
  static constexpr bool kValid = true;
  static constexpr uint32_t kSize = 0;
  static constexpr uint32_t kAlign = 1;
  static const char* name() { return "bytes"; }
};

/// Shuffle flows: every record goes to one target.
template <class Derived>
class ShuffleBuilder : public RecordFlowBuilder<Derived> {
 public:
  /// The caller names the target of every record with Source::push_to.
  Derived& explicit_targets() {
    FlowSpecAccess::route(this->spec_) = Route::kExplicit;
    return static_cast<Derived&>(*this);
  }

 protected:
  using RecordFlowBuilder<Derived>::RecordFlowBuilder;
  /// Route by a hash of bytes [offset, offset+size) of each record.
  void hash_key(uint32_t offset, uint32_t size) {
    FlowSpecAccess::route(this->spec_) = Route::kHashKey;
    FlowSpecAccess::key_offset(this->spec_) = offset;
    FlowSpecAccess::key_size(this->spec_) = size;
  }
  void route_by(RouteFunction fn) {
    FlowSpecAccess::route(this->spec_) = Route::kFunction;
    FlowSpecAccess::route_fn(this->spec_) = std::move(fn);
  }
};

/// Replicate flows: every record goes to every target.
template <class Derived>
class ReplicateBuilder : public RecordFlowBuilder<Derived> {
 public:
  /// One identical order of all records at every target (see the top of this file).
  Derived& ordered(bool on = true) {
    FlowSpecAccess::ordered(this->spec_) = on;
    return static_cast<Derived&>(*this);
  }
  /// How long a target waits for a missing sequence number before kGap.
  Derived& gap_timeout(std::chrono::milliseconds t) {
    FlowSpecAccess::gap_timeout_ms(this->spec_) = static_cast<uint32_t>(t.count());
    return static_cast<Derived&>(*this);
  }
  /// The rank whose memory holds the sequencer (by default the first
  /// target's): a rank of one of the flow's sources or targets. Sources
  /// take their numbers there, so while that rank is stopped or cut off no
  /// source can push; put it where a failure ends the sources anyway (the
  /// clients' rank of a replicated service), not on a target that may
  /// fail alone. That rank's Cluster::leave() waits (to the flow's setup
  /// timeout) until every other participant has destroyed the flow.
  Derived& sequencer_at(uint32_t rank) {
    FlowSpecAccess::sequencer_rank(this->spec_) = rank;
    return static_cast<Derived&>(*this);
  }
  /// An ordered multicast that may lose a slow target's records, as a
  /// network does (NOPaxos' ordered unreliable multicast): a target whose
  /// ring has had no room for `after` misses segments, each of which it
  /// later sees as a gap (Status::kGap, after its gap timeout), until it
  /// has room again; the others go on without waiting for it. close()
  /// still waits for every target's room, so each one learns where the
  /// flow ends. Without it (the default) a source waits for every target.
  Derived& skip_full_targets_after(std::chrono::milliseconds after) {
    FlowSpecAccess::skip_full_ms(this->spec_) = static_cast<uint32_t>(after.count());
    return static_cast<Derived&>(*this);
  }

 protected:
  using RecordFlowBuilder<Derived>::RecordFlowBuilder;
};

}  // namespace detail

/// A shuffle flow spec: records are T, or byte records of any length for
/// T = Bytes (a record never spans two segments, so the largest is
/// FlowSpec::max_record_bytes(): segment_bytes - 4 for a segment_bytes that
/// is a multiple of 8, 8188 by default). Each record goes to one target.
template <class T>
class ShuffleSpec : private detail::ShuffleBuilder<ShuffleSpec<T>> {
  static_assert(detail::RecordShape<T>::kValid);
  using Base = detail::ShuffleBuilder<ShuffleSpec<T>>;
  friend class detail::FlowBuilder<ShuffleSpec<T>>;
  friend class detail::RecordFlowBuilder<ShuffleSpec<T>>;
  friend Base;
  static constexpr bool kBytes = std::is_same_v<T, Bytes>;

 public:
  /// The setters every shuffle spec has (detail::ShuffleBuilder, flow_spec.h):
  /// sources(), targets(), segment_bytes(), ring_segments(), type_tag(),
  /// optimize(), explicit_targets(), and spec(), the untyped FlowSpec.
  ///@{
  using Base::explicit_targets;
  using Base::optimize;
  using Base::ring_segments;
  using Base::segment_bytes;
  using Base::sources;
  using Base::spec;
  using Base::operator const FlowSpec&;
  using Base::targets;
  using Base::type_tag;
  ///@}
  /// The record type.
  using Record = T;
  /// A spec for flow `name`, routed by a hash of the whole record until
  /// key() or route() says otherwise.
  explicit ShuffleSpec(std::string name)
      : Base(std::move(name), FlowType::kShuffle, detail::RecordShape<T>::kSize,
             detail::RecordShape<T>::kAlign, detail::RecordShape<T>::name()) {}
  /// Route by a hash of this field (the default routing once a key is named).
  /// (Records that are not classes, such as uint64_t, are routed by a hash
  /// of the whole record, the default.)
  template <class K, class C = T>
  requires(!kBytes && std::is_class_v<C>) ShuffleSpec& key(K C::*member) {
    static_assert(std::is_trivially_copyable_v<K>);
    alignas(T) static const unsigned char probe[sizeof(T)] = {};
    const C* p = reinterpret_cast<const C*>(probe);
    this->hash_key(
        static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(&(p->*member)) - probe),
        sizeof(K));
    return *this;
  }
  /// Byte records: route by a hash of bytes [offset, offset+size) of each
  /// record; a record shorter than that is routed by a hash of all its bytes.
  ShuffleSpec& key(uint32_t offset, uint32_t size) requires kBytes {
    this->hash_key(offset, size);
    return *this;
  }
  /// Route by any callable `uint32_t(const T&, uint32_t num_targets)` (byte
  /// records: `uint32_t(std::span<const std::byte>, uint32_t num_targets)`)
  /// returning an index into targets(). Not compared across participants:
  /// all must pass the same function.
  template <class F>
  ShuffleSpec& route(F fn) {
    this->route_by([fn = std::move(fn)](const void* rec, size_t n, uint32_t targets) -> uint32_t {
      if constexpr (kBytes) {
        return fn(std::span<const std::byte>(static_cast<const std::byte*>(rec), n), targets);
      } else {
        T t;
        std::memcpy(&t, rec, sizeof(T));
        return fn(t, targets);
      }
    });
    return *this;
  }
};

/// A ShuffleSpec<T> for flow `name`, to chain setters on (T may be Bytes).
template <class T>
ShuffleSpec<T> shuffle(std::string name) {
  return ShuffleSpec<T>(std::move(name));
}

/// A replicate flow spec: every record (of type T, or Bytes: as for
/// ShuffleSpec) goes to every target.
template <class T>
class ReplicateSpec : private detail::ReplicateBuilder<ReplicateSpec<T>> {
  static_assert(detail::RecordShape<T>::kValid);
  using Base = detail::ReplicateBuilder<ReplicateSpec<T>>;
  friend class detail::FlowBuilder<ReplicateSpec<T>>;
  friend class detail::RecordFlowBuilder<ReplicateSpec<T>>;
  friend Base;

 public:
  /// The setters every replicate spec has (detail::ReplicateBuilder,
  /// flow_spec.h): sources(), targets(), segment_bytes(), ring_segments(),
  /// type_tag(), optimize(), ordered(), gap_timeout(), sequencer_at(),
  /// skip_full_targets_after(), and spec(), the
  /// untyped FlowSpec.
  ///@{
  using Base::gap_timeout;
  using Base::optimize;
  using Base::ordered;
  using Base::ring_segments;
  using Base::segment_bytes;
  using Base::sequencer_at;
  using Base::skip_full_targets_after;
  using Base::sources;
  using Base::spec;
  using Base::operator const FlowSpec&;
  using Base::targets;
  using Base::type_tag;
  ///@}
  /// The record type.
  using Record = T;
  /// A spec for flow `name` (unordered until ordered() says otherwise).
  explicit ReplicateSpec(std::string name)
      : Base(std::move(name), FlowType::kReplicate, detail::RecordShape<T>::kSize,
             detail::RecordShape<T>::kAlign, detail::RecordShape<T>::name()) {}
};

/// A ReplicateSpec<T> for flow `name`, to chain setters on (T may be Bytes).
template <class T>
ReplicateSpec<T> replicate(std::string name) {
  return ReplicateSpec<T>(std::move(name));
}

/// The 1.0 names of the byte-record specs, kept for existing code: use
/// ShuffleSpec<Bytes> / shuffle<Bytes>(name) and ReplicateSpec<Bytes> /
/// replicate<Bytes>(name).
///@{
using BytesShuffleSpec [[deprecated("use sluice::ShuffleSpec<sluice::Bytes>")]] =
    ShuffleSpec<Bytes>;
using BytesReplicateSpec [[deprecated("use sluice::ReplicateSpec<sluice::Bytes>")]] =
    ReplicateSpec<Bytes>;
[[deprecated("use sluice::shuffle<sluice::Bytes>(name)")]] inline ShuffleSpec<Bytes> shuffle_bytes(
    std::string name) {
  return ShuffleSpec<Bytes>(std::move(name));
}
[[deprecated("use sluice::replicate<sluice::Bytes>(name)")]] inline ReplicateSpec<Bytes>
replicate_bytes(std::string name) {
  return ReplicateSpec<Bytes>(std::move(name));
}
///@}

}  // namespace sluice
SLUICE_API_END
