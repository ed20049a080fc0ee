/// @file
/// sluice/flow.h: the sources and targets that feed and drain flows.
///
/// A flow moves records from a set of source endpoints to a set of target
/// endpoints. It is declared once, by name, with the same spec (flow_spec.h)
/// on every participating rank (Cluster::declare checks that they agree).
/// Each worker thread then opens its own Source or Target for its endpoint
/// and uses it without further coordination. One Source<T> and one Target<T>
/// serve every kind of flow: T is the record type, or Bytes for
/// variable-length byte records (Source<Bytes> pushes spans of bytes,
/// Target<Bytes> consumes RecordBatch'es of them).
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
/// Replicate flows (replicate<T>(), T may be Bytes): every target consumes
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

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "sluice/deadline.h"
#include "sluice/detail/flow_cores.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow_spec.h"

SLUICE_API_BEGIN
namespace sluice {

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
  /// destructor hands that wait to its Cluster (at most 5 s, in the
  /// background; Cluster::leave() waits for it). kTimeout: call again.
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
  /// Records of this source that target `target` (an index into the flow's
  /// targets) consumed and gave back, as far as this source has heard: a
  /// target gives a segment back when it consumes the next one (or
  /// releases a kept one), whole segments only, so the count is always the
  /// number of this source's first records for that target (in push order)
  /// that it certainly got, never more. After kPeerLost it says which of the
  /// records pushed to a lost target may not have arrived: those after it
  /// (the app can send them elsewhere). Over ofi it counts the credit heard
  /// by this source's calls (and a Worker driving it).
  uint64_t delivered(uint32_t target) { return core_->delivered(target); }
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
  /// Records consumed from source `source` (an index into the flow's
  /// sources) so far: the batches consume() returned from it, whole. After
  /// a source's rank is lost it says how far that source's records reached
  /// this target (per source FIFO: its first received(source) records for
  /// this target, each once), for a replacement to go on from.
  uint64_t received(uint32_t source) const { return core_->received(source); }
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

/// The sending end of a flow of byte records (ShuffleSpec<Bytes>,
/// ReplicateSpec<Bytes>): Source<T>'s verbs, each record a span of bytes of
/// any length up to FlowSpec::max_record_bytes().
template <>
class Source<Bytes> {
 public:
  Source() = default;

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
  /// As Source<T>::delivered: this source's byte records target `target` consumed.
  uint64_t delivered(uint32_t target) { return core_->delivered(target); }
  /// As Source::num_targets().
  uint32_t num_targets() const { return core_->num_targets_; }
  /// False for a default-constructed or moved-from Source.
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

  // Sources come from Cluster::source (or detail::source_from_core).
  friend Source detail::source_from_core<Bytes>(std::unique_ptr<detail::SourceCore> core);
  explicit Source(std::unique_ptr<detail::SourceCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::SourceOwner core_;  // its deleter is release_source: never waits
  Status last_ = Status::kOk;
};

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
  // Batches come from Target<Bytes>::consume (or detail::make_record_batch).
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

/// The receiving end of a flow of byte records: Target<T>'s verbs, each
/// batch a RecordBatch (one segment's records, in push order).
template <>
class Target<Bytes> {
 public:
  Target() = default;

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
  /// As Target::keep(): the last batch's records stay where they are, valid
  /// until release() of the id returned.
  [[nodiscard]] uint64_t keep() { return core_->keep_held(); }
  /// As Target::release(): gives back a batch keep() kept.
  void release(uint64_t kept) { core_->release_kept(kept); }
  /// As Target::error().
  const std::string& error() const { return detail::error_text(status_, core_->error()); }
  /// After kPeerLost: the rank (and host) it is about, where one is known.
  std::optional<LostPeer> lost_peer() const { return core_->lost_peer(); }
  /// As Target<T>::received: byte records consumed from source `source`.
  uint64_t received(uint32_t source) const { return core_->received(source); }
  /// False for a default-constructed or moved-from Target.
  explicit operator bool() const { return core_ != nullptr; }

 private:
  // Targets come from Cluster::target (or detail::target_from_core).
  friend Target detail::target_from_core<Bytes>(std::unique_ptr<detail::TargetCore> core);
  explicit Target(std::unique_ptr<detail::TargetCore> core) : core_(core.release()) {}

  friend class Worker;
  detail::TargetOwner core_;  // its deleter is release_target: never waits
  Status status_ = Status::kOk;
  uint32_t last_source_ = 0;
  uint64_t last_sequence_ = 0;
};

/// The 1.0 names of the byte-record ends, kept for existing code.
///@{
using BytesSource [[deprecated("use sluice::Source<sluice::Bytes>")]] = Source<Bytes>;
using BytesTarget [[deprecated("use sluice::Target<sluice::Bytes>")]] = Target<Bytes>;
///@}

}  // namespace sluice
SLUICE_API_END
