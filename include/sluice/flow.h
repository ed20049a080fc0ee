/// @file
/// sluice/flow.h: flows, and the sources and targets that feed and drain them.
///
/// A flow moves records from a set of source endpoints to a set of target
/// endpoints. It is declared once, by name, with the same spec on every
/// participating rank (Cluster::declare checks that they agree). Each worker
/// thread then opens its own Source or Target for its endpoint and uses it
/// without further coordination.
///
/// @code
///   struct Order { uint64_t key; uint64_t amount; };
///   auto spec = sluice::shuffle<Order>("orders")
///                   .sources(cluster.all_ranks(2))
///                   .targets(cluster.all_ranks(2))
///                   .key(&Order::key);
///   auto flow = cluster.declare(spec);               // keep it while the flow runs
///   auto out = cluster.source(spec, slot);       // on the thread of `slot`
///   if (out.push(order) != sluice::Status::kOk) { ... out.error() ... }
///   (void)out.close();
///   auto in = cluster.target(spec, slot);
///   auto batch = in.consume();
///   for (; batch; batch = in.consume())
///     for (const Order& o : *batch) total += o.amount;
///   if (batch.status() != sluice::Status::kEndOfFlow) { ... in.error() ... }
/// @endcode
///
/// Delivery (shuffle flows): every record pushed by a source that closes
/// successfully is consumed exactly once by exactly one target, and the
/// records of one source reach a target in the order they were pushed
/// (per-source FIFO). Records of different sources interleave arbitrarily.
///
/// Replicate flows (replicate<T>() / replicate_bytes()): every target consumes
/// every record of every source exactly once, per-source FIFO. With
/// .ordered(), all targets also consume all records in one identical global
/// order: sources take sequence numbers for their batches from a sequencer (a
/// 64-bit fetch-and-add on a counter the flow's first target rank owns), and
/// targets merge their rings by sequence number. A sequence number that never
/// arrives (its source died after taking it) is reported as Status::kGap with
/// its number after the flow's gap timeout, instead of waiting forever.
///
/// Thread safety: a spec is a value (copy it freely). A Source or Target is
/// owned by one thread at a time: it may be moved to another thread, but two
/// threads must never call it concurrently. Different sources and targets are
/// independent and may be used in parallel.
///
/// Ownership: a Source or Target refers to memory owned by its Cluster; it must
/// be destroyed (or moved from) before the Cluster is.
#pragma once

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "sluice/deadline.h"
#include "sluice/detail/flow_cores.h"
#include "sluice/detail/hash.h"
#include "sluice/errors.h"
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

/// The untyped description of a flow, as the registry and transports see it.
/// Users build one with shuffle<T>() or shuffle_bytes() rather than by hand.
struct FlowSpec {
  /// The name the flow is declared and opened by: 1 to 200 bytes, no
  /// newline, NUL or '='.
  std::string name;
  /// Shuffle or replicate.
  FlowType type = FlowType::kShuffle;
  uint32_t record_size = 0;   ///< bytes per record; 0: variable-length byte records
  uint32_t record_align = 1;  ///< alignof the record type
  /// The record type's identity, compared at declare with its size and
  /// alignment: typeid(T).name() by default (the same in every process built
  /// from the same sources), "bytes" for byte records; set it with
  /// type_tag() when processes built differently share a flow.
  std::string type_name;
  /// The endpoints that push into the flow; no endpoint twice.
  std::vector<Endpoint> sources;
  /// The endpoints that consume from it; no endpoint twice.
  std::vector<Endpoint> targets;
  /// How a record's target is chosen: a hash of the whole record (the
  /// default), of a key (kHashKey), a function (kFunction), or named by the
  /// caller (kExplicit; every replicate flow). The builders set it.
  Route route = Route::kHashRecord;
  uint32_t key_offset = 0;  ///< kHashKey: where the key lives in a record
  uint32_t key_size = 0;    ///< kHashKey: its size in bytes
  RouteFunction route_fn;   ///< kFunction
  /// Bandwidth (the default) or Latency; see Optimize.
  Optimize optimize = Optimize::kBandwidth;
  uint32_t segment_bytes = 0;  ///< payload per segment; 0: 8 KiB (Bandwidth), one record (Latency)
  /// Segments per ring; 0: 16 (Bandwidth), 64 (Latency). An ordered
  /// Bandwidth flow with a target on another host, whose sources number half
  /// a ring at a time with one remote fetch-and-add, gets enough for 512 KiB
  /// (64 segments of the default 8 KiB; never fewer than 16).
  uint32_t ring_segments = 0;
  /// Replicate flows only: one global order for all targets (see above), and
  /// how long a target waits for a missing sequence number before it reports
  /// a gap (0: 2000 ms).
  ///@{
  bool ordered = false;
  uint32_t gap_timeout_ms = 0;
  ///@}

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
  uint32_t effective_gap_timeout_ms() const { return gap_timeout_ms != 0 ? gap_timeout_ms : 2000; }
  /// Bytes at the start of every segment's payload that carry its sequence
  /// number (ordered replicate flows: 8, or the record alignment if that is
  /// larger, so records after it stay aligned), or 0.
  uint32_t segment_prefix_bytes() const {
    return ordered ? (record_align > 8 ? record_align : 8) : 0;
  }
  /// The largest record push() takes: record_size for typed flows; for byte
  /// records, what fits one segment with its 4-byte length and padding to 8:
  /// segment_bytes - 4, rounded down to a multiple of 8 first, less 8 on an
  /// ordered flow. push() of a larger one returns kInvalid naming this limit.
  uint32_t max_record_bytes() const;
  /// The "field=value" lines every participant must agree on (one per line,
  /// fixed order); the registry compares these and names fields that differ.
  std::string canonical() const;
};

// Spec builders. Every flow kind is described by one builder: the setters
// all kinds share (endpoints, segment size and ring depth; record flows also
// type_tag and optimize) live in detail::FlowBuilder / detail::RecordFlowBuilder,
// and each kind adds only its own (shuffle: key, route, explicit_targets;
// replicate: ordered, gap_timeout; combiner.h: group_by and the aggregates).
// Every setter returns the builder itself, so calls chain in any order:
//   sluice::shuffle<T>("x").sources(...).targets(...).key(&T::k).segment_bytes(4096)
namespace detail {

/// The setters every flow kind has. `Derived` provides
/// `FlowSpec& mutable_flow_spec()`, the spec the setters fill in.
template <class Derived>
class FlowBuilder {
 public:
  /// The endpoints that push into the flow.
  Derived& sources(std::vector<Endpoint> eps) {
    flow().sources = std::move(eps);
    return self();
  }
  /// The endpoints that consume from it.
  Derived& targets(std::vector<Endpoint> eps) {
    flow().targets = std::move(eps);
    return self();
  }
  /// Payload bytes per segment (Bandwidth mode); a multiple of 64 is best.
  Derived& segment_bytes(uint32_t n) {
    flow().segment_bytes = n;
    return self();
  }
  /// Segments per (source, target) ring: the most a source runs ahead.
  Derived& ring_segments(uint32_t n) {
    flow().ring_segments = n;
    return self();
  }

 protected:
  FlowBuilder() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  FlowSpec& flow() { return self().mutable_flow_spec(); }
};

/// A builder that owns its FlowSpec: the shuffle and replicate kinds, typed
/// or of byte records.
template <class Derived>
class RecordFlowBuilder : public FlowBuilder<Derived> {
 public:
  /// Names the record type for the check at declare (see FlowSpec::type_name).
  Derived& type_tag(std::string tag) {
    spec_.type_name = std::move(tag);
    return static_cast<Derived&>(*this);
  }
  Derived& optimize(Optimize o) {
    spec_.optimize = o;
    return static_cast<Derived&>(*this);
  }
  /// The untyped spec, as Cluster::declare takes it.
  const FlowSpec& spec() const { return spec_; }

 protected:
  /// record_size 0: byte records (type name "bytes").
  RecordFlowBuilder(std::string name, FlowType type, uint32_t record_size, uint32_t record_align,
                    std::string type_name) {
    spec_.name = std::move(name);
    spec_.type = type;
    spec_.record_size = record_size;
    spec_.record_align = record_align;
    spec_.type_name = std::move(type_name);
    if (type == FlowType::kReplicate) spec_.route = Route::kExplicit;
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

/// Shuffle flows: every record goes to one target.
template <class Derived>
class ShuffleBuilder : public RecordFlowBuilder<Derived> {
 public:
  /// The caller names the target of every record with Source::push_to.
  Derived& explicit_targets() {
    this->spec_.route = Route::kExplicit;
    return static_cast<Derived&>(*this);
  }

 protected:
  using RecordFlowBuilder<Derived>::RecordFlowBuilder;
  /// Route by a hash of bytes [offset, offset+size) of each record.
  void hash_key(uint32_t offset, uint32_t size) {
    this->spec_.route = Route::kHashKey;
    this->spec_.key_offset = offset;
    this->spec_.key_size = size;
  }
  void route_by(RouteFn fn) {
    this->spec_.route = Route::kFunction;
    this->spec_.route_fn = std::move(fn);
  }
};

/// Replicate flows: every record goes to every target.
template <class Derived>
class ReplicateBuilder : public RecordFlowBuilder<Derived> {
 public:
  /// One identical order of all records at every target (see the top of this file).
  Derived& ordered(bool on = true) {
    this->spec_.ordered = on;
    return static_cast<Derived&>(*this);
  }
  /// How long a target waits for a missing sequence number before kGap.
  Derived& gap_timeout(std::chrono::milliseconds t) {
    this->spec_.gap_timeout_ms = static_cast<uint32_t>(t.count());
    return static_cast<Derived&>(*this);
  }

 protected:
  using RecordFlowBuilder<Derived>::RecordFlowBuilder;
};

}  // namespace detail

/// A typed shuffle flow spec: records are T, routed to one target each.
/// Its setters sources(), targets(), segment_bytes(), ring_segments(),
/// type_tag(), optimize() and explicit_targets(), and spec(), come from
/// detail::ShuffleBuilder (flow.h).
template <class T>
class ShuffleSpec : public detail::ShuffleBuilder<ShuffleSpec<T>> {
  static_assert(detail::check_record_type<T>());

 public:
  /// The record type.
  using Record = T;
  /// A spec for flow `name`, routed by a hash of the whole record until
  /// key() or route() says otherwise.
  explicit ShuffleSpec(std::string name)
      : detail::ShuffleBuilder<ShuffleSpec>(std::move(name), FlowType::kShuffle, sizeof(T),
                                            alignof(T), typeid(T).name()) {}
  /// Route by a hash of this field (the default routing once a key is named).
  /// (Records that are not classes, such as uint64_t, are routed by a hash
  /// of the whole record, the default.)
  template <class K, class C = T>
  requires std::is_class_v<C> ShuffleSpec& key(K C::*member) {
    static_assert(std::is_trivially_copyable_v<K>);
    alignas(T) static const unsigned char probe[sizeof(T)] = {};
    const C* p = reinterpret_cast<const C*>(probe);
    this->hash_key(
        static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(&(p->*member)) - probe),
        sizeof(K));
    return *this;
  }
  /// Route by any callable `uint32_t(const T&, uint32_t num_targets)` returning
  /// an index into targets(). Not compared across participants: all must pass
  /// the same function.
  template <class F>
  ShuffleSpec& route(F fn) {
    this->route_by([fn = std::move(fn)](const void* rec, size_t, uint32_t n) -> uint32_t {
      T t;
      std::memcpy(&t, rec, sizeof(T));
      return fn(t, n);
    });
    return *this;
  }
};

/// A ShuffleSpec<T> for flow `name`, to chain setters on.
template <class T>
ShuffleSpec<T> shuffle(std::string name) {
  return ShuffleSpec<T>(std::move(name));
}

/// A shuffle flow of variable-length byte records. A record never spans two
/// segments, so the largest record is FlowSpec::max_record_bytes()
/// (segment_bytes - 4 for a segment_bytes that is a multiple of 8: 8188 by default).
/// Its other setters are ShuffleSpec's (detail::ShuffleBuilder, flow.h).
class BytesShuffleSpec : public detail::ShuffleBuilder<BytesShuffleSpec> {
 public:
  /// A spec for flow `name`, routed by a hash of the whole record until
  /// key() or route() says otherwise.
  explicit BytesShuffleSpec(std::string name)
      : detail::ShuffleBuilder<BytesShuffleSpec>(std::move(name), FlowType::kShuffle, 0, 1,
                                                 "bytes") {}
  /// Route by a hash of bytes [offset, offset+size) of each record; a record
  /// shorter than that is routed by a hash of all its bytes.
  BytesShuffleSpec& key(uint32_t offset, uint32_t size) {
    hash_key(offset, size);
    return *this;
  }
  /// `uint32_t(std::span<const std::byte> record, uint32_t num_targets)`.
  template <class F>
  BytesShuffleSpec& route(F fn) {
    route_by([fn = std::move(fn)](const void* rec, size_t n, uint32_t targets) -> uint32_t {
      return fn(std::span<const std::byte>(static_cast<const std::byte*>(rec), n), targets);
    });
    return *this;
  }
};

/// A BytesShuffleSpec for flow `name`, to chain setters on.
inline BytesShuffleSpec shuffle_bytes(std::string name) {
  return BytesShuffleSpec(std::move(name));
}

/// A typed replicate flow spec: every record goes to every target.
/// Its setters sources(), targets(), segment_bytes(), ring_segments(),
/// type_tag(), optimize(), ordered() and gap_timeout(), and spec(), come from
/// detail::ReplicateBuilder (flow.h).
template <class T>
class ReplicateSpec : public detail::ReplicateBuilder<ReplicateSpec<T>> {
  static_assert(detail::check_record_type<T>());

 public:
  /// The record type.
  using Record = T;
  /// A spec for flow `name` (unordered until ordered() says otherwise).
  explicit ReplicateSpec(std::string name)
      : detail::ReplicateBuilder<ReplicateSpec>(std::move(name), FlowType::kReplicate, sizeof(T),
                                                alignof(T), typeid(T).name()) {}
};

/// A ReplicateSpec<T> for flow `name`, to chain setters on.
template <class T>
ReplicateSpec<T> replicate(std::string name) {
  return ReplicateSpec<T>(std::move(name));
}

/// A replicate flow of variable-length byte records. Its setters are
/// ReplicateSpec's (detail::ReplicateBuilder, flow.h).
class BytesReplicateSpec : public detail::ReplicateBuilder<BytesReplicateSpec> {
 public:
  /// A spec for flow `name` (unordered until ordered() says otherwise).
  explicit BytesReplicateSpec(std::string name)
      : detail::ReplicateBuilder<BytesReplicateSpec>(std::move(name), FlowType::kReplicate, 0, 1,
                                                     "bytes") {}
};

/// A BytesReplicateSpec for flow `name`, to chain setters on.
inline BytesReplicateSpec replicate_bytes(std::string name) {
  return BytesReplicateSpec(std::move(name));
}

class Worker;

/// The sending end of a flow for one endpoint. Move-only; one owning thread.
///
/// Lifecycle: push ... then close() (or close_and_wait()) for the guarantee,
/// or abort() to end without it. The destructor never waits. After a
/// successful close(), over ofi, the last segments may still be in flight
/// and the targets' confirmations still to come: the destructor hands the
/// endpoint to its Cluster, which finishes them in the background (at most
/// 5 s, then it gives up with a warning); Cluster::leave() waits for that,
/// so end a process with leave() (or use close_and_wait(), which waits
/// itself). Without close() the destructor behaves as abort(): the targets
/// learn at once that the flow is incomplete. (A target that fails for good
/// tells its sources when it fails; a failed source tells its targets when
/// it is destroyed: destroy it, or abort() it.)
template <class T>
class Source {
 public:
  Source() = default;

  /// Routes `r` and writes it into its target's ring, waiting for credit if
  /// the ring is full. kOk, kTimeout, kPeerLost, kClosed or kInvalid.
  /// On a replicate flow: writes `r` into every target's ring.
  [[nodiscard]] Status push(const T& r, Deadline deadline = kForever) {
    if (core_->replicate_) return last_ = replicate(r, deadline, false);
    return last_ = write(core_->route(&r, sizeof(T)), r, deadline, false);
  }
  /// As push, but never waits: kWouldBlock if the target's ring is full
  /// (on a replicate flow: if any target's is; then no target got `r`).
  /// Reports kPeerLost (not kWouldBlock) once the target is known lost.
  /// A shuffle source that lost a target has failed: from then on every
  /// push, to any target, reports kPeerLost (a replicate source goes on
  /// without a lost target while any is left).
  [[nodiscard]] Status try_push(const T& r) {
    if (core_->replicate_) return last_ = replicate(r, kForever, true);
    return last_ = write(core_->route(&r, sizeof(T)), r, kForever, true);
  }
  /// Sends `r` to targets()[target] whatever the flow's routing (shuffle flows only).
  [[nodiscard]] Status push_to(uint32_t target, const T& r, Deadline deadline = kForever) {
    return last_ = write(target, r, deadline, false);
  }
  /// As push_to, but never waits: kWouldBlock if the target's ring is full.
  [[nodiscard]] Status try_push_to(uint32_t target, const T& r) {
    return last_ = write(target, r, kForever, true);
  }
  /// Pushes a run of records, in order, with the results of as many push()
  /// calls (the same routing; each target gets its records in run order) but
  /// not their cost: the flow's fields and rings are read once per run, and
  /// with one target (or on a replicate flow) a whole segment's worth is one
  /// copy. For tiny records this is several times faster. kOk when every
  /// record went; otherwise the status of the first that could not go, and
  /// last_pushed() says how many did (a prefix of `records`; push the rest).
  [[nodiscard]] Status push(std::span<const T> records, Deadline deadline = kForever) {
    return last_ = write_run(records, deadline, false);
  }
  /// As push(records), but never waits: pushes the longest prefix that fits
  /// now and returns kWouldBlock if that is not all (see last_pushed()).
  [[nodiscard]] Status try_push(std::span<const T> records) {
    return last_ = write_run(records, kForever, true);
  }
  /// A run with the target of each record named, as push_to(targets[i],
  /// records[i]) for every i would send them (shuffle flows only; the two
  /// spans have the same length, else kInvalid and nothing goes). For
  /// applications that route themselves: a query engine's exchange, a
  /// partitioner that computed its radix bits.
  [[nodiscard]] Status push_to(std::span<const uint32_t> targets, std::span<const T> records,
                               Deadline deadline = kForever) {
    return last_ = write_run_to(targets, records, deadline, false);
  }
  /// As push_to(targets, records), but never waits: pushes the longest prefix
  /// that fits now and returns kWouldBlock if that is not all (see last_pushed()).
  [[nodiscard]] Status try_push_to(std::span<const uint32_t> targets, std::span<const T> records) {
    return last_ = write_run_to(targets, records, kForever, true);
  }
  /// How many records the last push(span), push_to(spans) or their try forms pushed.
  size_t last_pushed() const { return pushed_; }
  /// The index into targets() that push(r) sends `r` to (num_targets() for a
  /// flow declared explicit_targets()). Lets callers account per target.
  uint32_t target_of(const T& r) const { return core_->route(&r, sizeof(T)); }
  /// Publishes every partly filled segment now.
  [[nodiscard]] Status flush(Deadline deadline = kForever) {
    return last_ = core_->flush(deadline);
  }
  /// Publishes what is left and marks this source's end on every target.
  /// Afterwards push returns kClosed. Idempotent. After kTimeout or
  /// kWouldBlock call it again: it resumes (nothing is sent twice).
  [[nodiscard]] Status close(Deadline deadline = kForever) {
    return last_ = core_->close(deadline);
  }
  /// close(), then waits until every segment is delivered (over shm at once;
  /// over ofi when every target confirmed that all of them arrived), so that
  /// the process may exit at once afterwards. Without it, an ofi source's
  /// destructor waits (up to 5 s) for the same. kTimeout: call again.
  [[nodiscard]] Status close_and_wait(Deadline deadline = kForever) {
    if (Status s = core_->close(deadline); s != Status::kOk) return last_ = s;
    return last_ = core_->wait_delivered(deadline);
  }
  /// Ends this source without the flow's guarantee (leveldb's Abandon): its
  /// targets learn at once, over shm and ofi, that the flow is incomplete
  /// (their consume() reports kPeerLost naming this source), rather than
  /// when this process exits. Later calls return kClosed. No effect after a
  /// successful close(), or on a default-constructed or moved-from Source.
  /// Returns within 100 ms (over ofi it drives the endpoint that long at
  /// most, so that the abort message leaves).
  void abort() {
    if (core_) core_->abort();
  }
  /// Why the last call failed; empty when the last call returned kOk.
  const std::string& error() const { return detail::error_text(last_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// How many targets the flow has: push_to takes 0 .. num_targets() - 1.
  uint32_t num_targets() const { return core_->num_targets_; }
  /// False for a default-constructed or moved-from Source.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  Status write(uint32_t target, const T& r, Deadline deadline, bool try_only) {
    if (target >= core_->num_targets_ || core_->replicate_) [[unlikely]] {
      return core_->fail_invalid(core_->replicate_
                                     ? "push_to() on a replicate flow: push() sends to every target"
                                     : "target index out of range (or push() on a flow declared "
                                       "explicit_targets(): use push_to)");
    }
    if (core_->latency_) [[unlikely]] {
      if (detail::push_fast<sizeof(T)>(core_.get(), target, &r)) return Status::kOk;
    }
    detail::Lane& lane = core_->lanes_[target];
    if (static_cast<size_t>(lane.end - lane.cur) < sizeof(T)) [[unlikely]] {
      Status s = core_->reserve(target, sizeof(T), deadline, try_only);
      if (s != Status::kOk) return s;
    }
    if (core_->latency_) [[unlikely]] {
      // Its last word last (flow_cores.h: a Latency ring's target may poll it).
      detail::copy_record<sizeof(T)>(lane.cur, &r);
      lane.cur += sizeof(T);
      return core_->publish(target, deadline, try_only);
    }
    std::memcpy(lane.cur, &r, sizeof(T));
    lane.cur += sizeof(T);
    return Status::kOk;
  }
  Status replicate(const T& r, Deadline deadline, bool try_only) {
    return detail::replicate_write(core_.get(), sizeof(T), sizeof(T), deadline, try_only,
                                   [&r](std::byte* dst) { std::memcpy(dst, &r, sizeof(T)); });
  }
  Status write_run_to(std::span<const uint32_t> targets, std::span<const T> records,
                      Deadline deadline, bool try_only) {
    if (targets.size() != records.size()) [[unlikely]] {
      pushed_ = 0;
      return core_->fail_invalid("push_to(targets, records): the spans differ in length");
    }
    return detail::push_run<sizeof(T)>(
        core_.get(), reinterpret_cast<const std::byte*>(records.data()), targets.data(),
        records.size(), deadline, try_only, &pushed_,
        [&](size_t i) { return write(targets[i], records[i], deadline, try_only); });
  }
  Status write_run(std::span<const T> records, Deadline deadline, bool try_only) {
    return detail::push_run<sizeof(T)>(
        core_.get(), reinterpret_cast<const std::byte*>(records.data()), nullptr, records.size(),
        deadline, try_only, &pushed_, [&](size_t i) {
          const T& r = records[i];
          return core_->replicate_ ? replicate(r, deadline, try_only)
                                   : write(core_->route(&r, sizeof(T)), r, deadline, try_only);
        });
  }

  // Sources come from Cluster::source (or detail::source_from_core).
  friend Source detail::source_from_core<T>(std::unique_ptr<detail::SourceCore> core);
  explicit Source(std::unique_ptr<detail::SourceCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::SourceOwner core_;  // its deleter is release_source: never waits
  Status last_ = Status::kOk;
  size_t pushed_ = 0;
};

namespace detail {
template <class T>
Source<T> source_from_core(std::unique_ptr<SourceCore> core) {
  return Source<T>(std::move(core));
}

/// True when R is a run of a Source<T>'s records (a span, vector, array of
/// T) rather than one record: Worker::push takes it as a run.
template <class S, class R>
inline constexpr bool is_record_run = false;
template <class T, class R>
inline constexpr bool is_record_run<Source<T>, R> =
    !std::is_same_v<std::remove_cvref_t<R>, T> &&
    std::is_convertible_v<const R&, std::span<const T>>;
}  // namespace detail

/// The receiving end of a flow for one endpoint. Move-only; one owning thread.
template <class T>
class Target {
 public:
  Target() = default;

  /// The next batch of records (one segment of one source), waiting until one
  /// is published. The view points into the ring and stays valid until the
  /// next consume() on this target. Returns no batch, with its Status (also
  /// status()), when every source has closed and all was consumed
  /// (kEndOfFlow), on kTimeout, or kPeerLost (see error() and lost_peer()).
  ///
  /// Ordered replicate flows also return no batch with kGap when a
  /// sequence number never arrived within the flow's gap timeout (gap() says
  /// which); the next consume() goes on after it.
  Result<std::span<const T>> consume(Deadline deadline = kForever) {
    detail::SegmentView v;
    status_ = core_->fast_ != nullptr ? detail::next_fast(core_.get(), deadline, &v)
                                      : core_->next(deadline, &v);
    if (status_ != Status::kOk) return status_;
    last_source_ = v.source;
    last_sequence_ = v.sequence;
    return std::span<const T>(reinterpret_cast<const T*>(v.data), v.bytes / sizeof(T));
  }
  /// consume() that never waits: no batch, with kWouldBlock, if nothing is
  /// ready (the one "would block" status of every try_* call).
  Result<std::span<const T>> try_consume() {
    auto batch = consume(Deadline::min());
    if (status_ == Status::kTimeout) return status_ = Status::kWouldBlock;
    return batch;
  }
  /// The outcome of the last consume(): kOk, kEndOfFlow, kTimeout (try_consume:
  /// kWouldBlock), kGap or kPeerLost.
  Status status() const { return status_; }
  /// Index into the flow's sources() of the last batch's source.
  uint32_t last_source() const { return last_source_; }
  /// Ordered replicate flows: the last batch's sequence number (batches are
  /// consumed in increasing sequence order, the same at every target).
  uint64_t last_sequence() const { return last_sequence_; }
  /// After kGap: the sequence number that never arrived.
  uint64_t gap() const { return core_->gap(); }
  /// Keeps the batch the last consume() returned: it stays valid, where it
  /// is in the ring, after later consume() calls, until release() of the id
  /// returned (0: no batch to keep; consume() did not return one). For
  /// holding received records without copying them (a language binding's
  /// arrays over the ring, a join's build side). While a batch is kept, its
  /// source has one segment of its ring fewer to run ahead with: keeping
  /// every segment of a ring stalls that source until one is released.
  /// Kept batches are given up with the target.
  [[nodiscard]] uint64_t keep() { return core_->keep_held(); }
  /// Gives back a batch keep() kept (each id once; an unknown id is ignored).
  void release(uint64_t kept) { core_->release_kept(kept); }
  /// Why the last consume() returned nothing; empty after kOk and kEndOfFlow.
  const std::string& error() const { return detail::error_text(status_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// False for a default-constructed or moved-from Target.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  // Targets come from Cluster::target (or detail::target_from_core).
  friend Target detail::target_from_core<T>(std::unique_ptr<detail::TargetCore> core);
  explicit Target(std::unique_ptr<detail::TargetCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::TargetOwner core_;  // its deleter is release_target: never waits
  Status status_ = Status::kOk;
  uint32_t last_source_ = 0;
  uint64_t last_sequence_ = 0;
};

namespace detail {
template <class T>
Target<T> target_from_core(std::unique_ptr<TargetCore> core) {
  return Target<T>(std::move(core));
}
}  // namespace detail

/// Sending end of a byte-record flow.
class BytesSource {
 public:
  BytesSource() = default;

  /// As Source::push, for a byte record.
  [[nodiscard]] Status push(std::span<const std::byte> rec, Deadline deadline = kForever) {
    if (core_->replicate_) return last_ = replicate(rec, deadline, false);
    return last_ = write(core_->route(rec.data(), rec.size()), rec, deadline, false);
  }
  /// As Source::try_push, for a byte record.
  [[nodiscard]] Status try_push(std::span<const std::byte> rec) {
    if (core_->replicate_) return last_ = replicate(rec, kForever, true);
    return last_ = write(core_->route(rec.data(), rec.size()), rec, kForever, true);
  }
  /// As Source::push_to, for a byte record.
  [[nodiscard]] Status push_to(uint32_t target, std::span<const std::byte> rec,
                               Deadline deadline = kForever) {
    return last_ = write(target, rec, deadline, false);
  }
  /// As Source::try_push_to, for a byte record.
  [[nodiscard]] Status try_push_to(uint32_t target, std::span<const std::byte> rec) {
    return last_ = write(target, rec, kForever, true);
  }
  /// As Source::flush.
  [[nodiscard]] Status flush(Deadline deadline = kForever) {
    return last_ = core_->flush(deadline);
  }
  /// As Source::close.
  [[nodiscard]] Status close(Deadline deadline = kForever) {
    return last_ = core_->close(deadline);
  }
  /// As Source::close_and_wait.
  [[nodiscard]] Status close_and_wait(Deadline deadline = kForever) {
    if (Status s = core_->close(deadline); s != Status::kOk) return last_ = s;
    return last_ = core_->wait_delivered(deadline);
  }
  /// As Source::abort().
  void abort() {
    if (core_) core_->abort();
  }
  /// As Source::error().
  const std::string& error() const { return detail::error_text(last_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// As Source::num_targets().
  uint32_t num_targets() const { return core_->num_targets_; }
  /// False for a default-constructed or moved-from BytesSource.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  static void put_record(std::byte* dst, std::span<const std::byte> rec) {
    const uint32_t len = static_cast<uint32_t>(rec.size());
    std::memcpy(dst, &len, sizeof(len));
    if (!rec.empty()) std::memcpy(dst + detail::kRecordHeaderBytes, rec.data(), rec.size());
  }
  Status replicate(std::span<const std::byte> rec, Deadline deadline, bool try_only) {
    return detail::replicate_write(core_.get(), detail::record_stride(rec.size()), rec.size(),
                                   deadline, try_only,
                                   [rec](std::byte* dst) { put_record(dst, rec); });
  }
  Status write(uint32_t target, std::span<const std::byte> rec, Deadline deadline, bool try_only) {
    if (target >= core_->num_targets_ || core_->replicate_) [[unlikely]] {
      return core_->fail_invalid(core_->replicate_
                                     ? "push_to() on a replicate flow: push() sends to every target"
                                     : "target index out of range (or push() on a flow declared "
                                       "explicit_targets(): use push_to)");
    }
    const size_t stride = detail::record_stride(rec.size());
    detail::Lane& lane = core_->lanes_[target];
    if (static_cast<size_t>(lane.end - lane.cur) < stride) [[unlikely]] {
      core_->record_bytes_ = rec.size();
      Status s = core_->reserve(target, stride, deadline, try_only);
      if (s != Status::kOk) return s;
    }
    put_record(lane.cur, rec);
    lane.cur += stride;
    if (core_->latency_) [[unlikely]]
      return core_->publish(target, deadline, try_only);
    return Status::kOk;
  }

  // Sources come from Cluster::source (or detail::bytes_source_from_core).
  friend BytesSource detail::bytes_source_from_core(std::unique_ptr<detail::SourceCore> core);
  explicit BytesSource(std::unique_ptr<detail::SourceCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::SourceOwner core_;  // its deleter is release_source: never waits
  Status last_ = Status::kOk;
};

namespace detail {
inline BytesSource bytes_source_from_core(std::unique_ptr<SourceCore> core) {
  return BytesSource(std::move(core));
}
}  // namespace detail

/// The byte records of one segment, iterated in push order. Each record is a
/// span into the ring, valid until the next consume() on its target.
class RecordBatch {
 public:
  /// Reads each record's length once into the iterator and checks it
  /// against the end of the segment, so that a peer rewriting the segment
  /// while it is iterated (it lives in shared or registered memory) can only
  /// change record bytes, never make iteration leave the segment: a length
  /// that no longer fits ends the iteration.
  class iterator {
   public:
    /// A record: its bytes, without its length.
    using value_type = std::span<const std::byte>;
    /// As a forward iterator has.
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    /// At the record at `p` of a payload that ends at `end` (begin() and
    /// end() make them).
    iterator(const std::byte* p, const std::byte* end) : p_(p), end_(end) { load(); }
    /// The current record.
    value_type operator*() const { return {p_ + detail::kRecordHeaderBytes, len_}; }
    /// Moves to the next record (to the end if a length no longer fits).
    iterator& operator++() {
      p_ += detail::record_stride(len_);
      if (p_ > end_) p_ = end_;
      load();
      return *this;
    }
    /// Moves to the next record; returns where it was.
    iterator operator++(int) {
      iterator t = *this;
      ++*this;
      return t;
    }
    /// At the same place.
    bool operator==(const iterator& o) const { return p_ == o.p_; }

   private:
    void load() {
      const size_t left = static_cast<size_t>(end_ - p_);
      if (left == 0) return;
      uint32_t len = 0;
      if (left >= detail::kRecordHeaderBytes) std::memcpy(&len, p_, sizeof(len));
      if (left < detail::kRecordHeaderBytes || len > left - detail::kRecordHeaderBytes) {
        p_ = end_;  // rewritten after it was checked: stop here
        len_ = 0;
        return;
      }
      len_ = len;
    }
    const std::byte* p_ = nullptr;
    const std::byte* end_ = nullptr;
    size_t len_ = 0;
  };

  /// An empty batch (what a failed consume() holds).
  RecordBatch() = default;
  /// The first record.
  iterator begin() const { return {data_, data_ + bytes_}; }
  /// Past the last record.
  iterator end() const { return {data_ + bytes_, data_ + bytes_}; }
  /// Payload bytes including record headers and padding.
  uint32_t bytes() const { return bytes_; }

 private:
  // Batches come from BytesTarget::consume (or detail::make_record_batch).
  friend RecordBatch detail::make_record_batch(const std::byte* data, uint32_t bytes);
  RecordBatch(const std::byte* data, uint32_t bytes) : data_(data), bytes_(bytes) {}

  const std::byte* data_ = nullptr;
  uint32_t bytes_ = 0;
};

namespace detail {
inline RecordBatch make_record_batch(const std::byte* data, uint32_t bytes) {
  return RecordBatch(data, bytes);
}
}  // namespace detail

/// Receiving end of a byte-record flow.
class BytesTarget {
 public:
  BytesTarget() = default;

  /// As Target::consume: the next segment's byte records.
  Result<RecordBatch> consume(Deadline deadline = kForever) {
    detail::SegmentView v;
    status_ = core_->next(deadline, &v);
    if (status_ != Status::kOk) return status_;
    last_source_ = v.source;
    last_sequence_ = v.sequence;
    return detail::make_record_batch(v.data, v.bytes);
  }
  /// As Target::try_consume: kWouldBlock if nothing is ready.
  Result<RecordBatch> try_consume() {
    auto batch = consume(Deadline::min());
    if (status_ == Status::kTimeout) return status_ = Status::kWouldBlock;
    return batch;
  }
  /// As Target::status().
  Status status() const { return status_; }
  /// As Target::last_source().
  uint32_t last_source() const { return last_source_; }
  /// As Target::last_sequence().
  uint64_t last_sequence() const { return last_sequence_; }
  /// As Target::gap().
  uint64_t gap() const { return core_->gap(); }
  /// As Target::error().
  const std::string& error() const { return detail::error_text(status_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// False for a default-constructed or moved-from BytesTarget.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  // Targets come from Cluster::target (or detail::bytes_target_from_core).
  friend BytesTarget detail::bytes_target_from_core(std::unique_ptr<detail::TargetCore> core);
  explicit BytesTarget(std::unique_ptr<detail::TargetCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::TargetOwner core_;  // its deleter is release_target: never waits
  Status status_ = Status::kOk;
  uint32_t last_source_ = 0;
  uint64_t last_sequence_ = 0;
};

namespace detail {
inline BytesTarget bytes_target_from_core(std::unique_ptr<TargetCore> core) {
  return BytesTarget(std::move(core));
}
}  // namespace detail

}  // namespace sluice
SLUICE_API_END
