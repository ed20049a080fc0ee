// sluice/detail/flow_cores.h: what the inline push and consume paths of
// flow.h need from the transports, and nothing else. Internal: applications
// use Source and Target (flow.h) and never name
// anything here; the transports in src/flow implement SourceCore and
// TargetCore. Included by flow.h.
//
// Thread safety: a SourceCore or TargetCore belongs to the thread that owns
// its Source or Target (flow.h), and is called only from it.
//
// Ownership: a Source or Target owns its core (std::unique_ptr); a core's
// lanes_ and fan_ point into memory the core owns, valid as long as it lives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "sluice/deadline.h"
#include "sluice/detail/cpu.h"
#include "sluice/detail/hash.h"
#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/hash.h"

SLUICE_API_BEGIN
namespace sluice {

class RecordBatch;
struct Bytes;
template <class T>
class Source;
template <class T>
class Target;
template <>
class Source<Bytes>;
template <>
class Target<Bytes>;

namespace detail {

using sluice::Route;
using RouteFn = sluice::RouteFunction;

// The text error() shows for the last call's status: the core's message for
// a failure, nothing after kOk or kEndOfFlow (so a message never outlives
// the failure it describes).
inline const std::string& error_text(Status last, const std::string& message) {
  static const std::string kNone;
  return last == Status::kOk || last == Status::kEndOfFlow ? kNone : message;
}

// Where the next record for one target goes: [cur, end) is free space in the
// segment being filled. Empty (cur == end) until a segment is reserved.
struct Lane {
  std::byte* cur = nullptr;
  std::byte* end = nullptr;
};

// A byte record in a segment: a 4-byte little-endian length, the bytes, and
// padding to the next multiple of 8.
inline constexpr size_t kRecordHeaderBytes = 4;
inline constexpr size_t record_stride(size_t n) {
  return (kRecordHeaderBytes + n + 7) & ~size_t{7};
}

// The Latency-mode fast path over shared memory. A Latency-mode flow puts
// every record in a segment of its own, so a round trip is two
// publications and two detections. Over a local ring of a flow with one
// record size, the inline push writes the record, its footer and the
// publication word itself, and the inline consume polls that word and
// hands the record out, each without a call (the bound they are held to
// is two processes bouncing one record; see docs/benchmarks.md). What the
// fast path does not cover (credit, a segment that is not exactly one
// record, END, waiting, failures) goes to the cores' slow paths, which
// read and write the same state. The footer is layout.h's: u32
// bytes_used | u32 flags | u64 seq at payload_bytes into the segment
// (src/flow/flow_source_shuffle.cc checks these constants against it).
inline constexpr uint32_t kFastFooterSeqOffset = 8;
inline constexpr uint32_t kFastConsumable = 1;  // layout::kConsumable

// A record of 56 or 64 B and its footer are two lines, so on such a flow
// the record's last word publishes it too (layout.h, "A second publication
// word"): the target polls it, in the line it reads the record from, and
// writes kFastTailEmpty back when it releases the segment. Every write of
// such a record into a Latency-mode ring puts that word last, with release
// order (copy_record), whether or not the target looks at it.
inline constexpr uint64_t kFastTailEmpty = 0xA5E1D0C4B3F29687ULL;  // layout::kTailEmpty
// The record sizes whose last word publishes them: too large to share a
// line with the 16-byte footer, small enough to fill one.
inline constexpr bool tail_published(size_t n) { return n > 48 && n <= 64 && n % 8 == 0; }
template <size_t N>
inline constexpr bool kTailPublished = tail_published(N);

// Puts the empty value back into the tail word at `tail` of a released
// segment, before the credit that lets its source write it again (that
// credit's release store orders it).
[[gnu::always_inline]] inline void empty_tail(std::byte* seg, uint32_t tail) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(seg + tail))
      .store(kFastTailEmpty, std::memory_order_relaxed);
}

// Copies a record of N bytes into a ring; for kTailPublished sizes, its
// last word last, released (dst is 8-byte aligned: segments start on
// 128 B and hold one such record in Latency mode).
template <size_t N>
[[gnu::always_inline]] inline void copy_record(std::byte* dst, const void* rec) {
  if constexpr (kTailPublished<N>) {
    std::memcpy(dst, rec, N - 8);
    uint64_t tail;
    std::memcpy(&tail, static_cast<const std::byte*>(rec) + N - 8, sizeof(tail));
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(dst + N - 8))
        .store(tail, std::memory_order_release);
  } else {
    std::memcpy(dst, rec, N);
  }
}

// What a source knows of one target's ring: the segment it fills or
// claims next and its cached credit, shared by the inline push and the
// source's slow path (FlowSource::Out is this struct).
struct OutRing {
  // ofi: segments handed to the provider; [posted, k) are published, not yet sent.
  uint64_t posted = 0;
  uint64_t k = 0;             // ring index of the segment being filled, or the next to claim
  uint64_t limit = 0;         // k may be claimed while k < limit (consumed + S, cached)
  std::byte* base = nullptr;  // payload of the segment being filled
  bool filling = false;
  bool ended = false;
  bool dropped = false;  // replicate flows: the target was lost; the others go on
  // Latency fast path (shuffle flows, local ring): segment 0's payload, or
  // null where the fast path is off. slot_mask = S - 1 (S a power of two);
  // footer = payload bytes, where the footer starts in a segment.
  std::byte* fast = nullptr;
  const std::atomic<uint32_t>* target_waiting = nullptr;  // the doorbell's `waiting`
  uint64_t fast_published = 0;  // segments the fast path published, not yet counted
  uint32_t slot_mask = 0;
  uint32_t stride = 0;
  uint32_t footer = 0;
};

// What a target knows of one source's ring on the fast path: the inline
// consume's copy of the target's position in it (the slow path takes it
// over on every call and hands it back).
struct FastIn {
  std::byte* segments = nullptr;  // segment 0's payload (the target writes tails: fast_tail_)
  uint64_t k = 0;                 // next segment to read
  uint64_t released = 0;          // segments finished with
  uint64_t published = 0;         // `released` as last told to the source
  uint64_t taken = 0;             // one-record segments the fast path handed out
  uint32_t slot_mask = 0;
  uint32_t stride = 0;
  uint32_t footer = 0;
};

// What a parked Worker (worker.h) waits on, and the sources it drives
// between the calls that name them; defined in src/flow/wait_set.h.
struct WaitSet;
struct DrivenSources;

// An endpoint a Worker can park on together with others. arm() adds what
// wakes it to `set` (shm: a futex word, announcing to the peer that this
// thread parks; ofi: its completion queue) and returns false if the endpoint
// can make progress already, so parking would be wrong; disarm() withdraws
// the announcement. wait_alone() sleeps on an ofi endpoint's completion
// queue (handling what arrives) when it is the only thing parked on.
class Waitable {
 public:
  virtual ~Waitable() = default;
  virtual bool arm(WaitSet& set) = 0;
  virtual void disarm() = 0;
  virtual void wait_alone(std::chrono::milliseconds timeout) = 0;
};

// The transport side of a source. The fields are read by the inline push
// path; everything else is behind the virtual slow path. Implemented in
// src/flow (one subclass per transport).
class SourceCore : public Waitable {
 public:
  // Leaves the Worker that drives it, if any.
  ~SourceCore() override;

  // Makes lanes[target] hold at least `bytes` of free space: publishes the
  // current segment and claims the next one, waiting for credit unless
  // `try_only`. On kOk the lane has room; otherwise nothing changed.
  virtual Status reserve(uint32_t target, size_t bytes, Deadline deadline, bool try_only) = 0;
  // Latency mode: publishes the lane's current segment (the record just
  // written) now. On a shuffle flow, a status other than kOk means the record
  // was taken back (as if never written); a replicate flow's record, once in
  // a ring, stays accepted (what could not be handed to the provider yet goes
  // with the next call).
  virtual Status publish(uint32_t target, Deadline deadline, bool try_only) = 0;
  virtual Status flush(Deadline deadline) = 0;
  virtual Status close(Deadline deadline) = 0;
  // After a successful close(): waits until every transfer completed.
  virtual Status wait_delivered(Deadline deadline) = 0;
  // Ends the source without the flow's guarantee and tells every target.
  virtual void abort() = 0;
  virtual Status fail_invalid(const char* what) = 0;
  virtual const std::string& error() const = 0;
  // After kPeerLost: the peer it is about, if one is known.
  virtual std::optional<LostPeer> lost_peer() const { return std::nullopt; }
  // Records target t consumed and gave back, as far as this source has
  // heard (Source::delivered).
  virtual uint64_t delivered(uint32_t /*t*/) { return 0; }

  // Driving in the background (worker.h): over ofi, what a source posted
  // (the END that close() handed over, a transfer the provider has not
  // finished) may move only while someone reads the endpoint's completion
  // queue, and the thread that pushed and closed may sit in Worker::run()
  // long after, or leave it for a barrier. A Worker that pushed or closed
  // this source calls drive() each poll, and parks on the queue too
  // (arm_driven), until drive() returns false: nothing of it is left to
  // move. While delivering() (closed, its last transfers not complete),
  // the Worker's run() does not return kEndOfFlow.
  virtual bool drive() { return false; }
  virtual bool delivering() const { return false; }
  virtual void arm_driven(WaitSet& /*set*/) {}
  // A Worker waited `waited` for this source's push, flush or close (its
  // own blocking calls count their waits themselves).
  virtual void count_wait(std::chrono::nanoseconds /*waited*/) {}
  // The fast path published to target t, whose target announced that it
  // parks: wake it.
  virtual void wake_target(uint32_t /*t*/) {}
  bool drivable_ = false;            // set by the transport: may need driving
  DrivenSources* driver_ = nullptr;  // the Worker's list this source is on

  // The target index of a record: inline for the common cases (one target,
  // an 8- or 4-byte key), out of line for the rest.
  [[gnu::always_inline]] uint32_t route(const void* rec, size_t n) const {
    if (num_targets_ == 1 && route_ != Route::kExplicit) return 0;
    if (route_ == Route::kHashKey && key_offset_ + key_size_ <= n) {
      const auto* key = static_cast<const std::byte*>(rec) + key_offset_;
      if (key_size_ == 8) {
        uint64_t k;
        std::memcpy(&k, key, 8);
        return reduce(mix64(k), num_targets_);
      }
      if (key_size_ == 4) {
        uint32_t k;
        std::memcpy(&k, key, 4);
        return reduce(mix64(k), num_targets_);
      }
    }
    return route_slow(rec, n);
  }

  uint32_t route_slow(const void* rec, size_t n) const;

  // reserve() / publish() target meaning "every lane of a replicate flow".
  static constexpr uint32_t kAllTargets = ~0u;

  Lane* lanes_ = nullptr;
  uint32_t num_targets_ = 0;
  Route route_ = Route::kHashRecord;
  uint32_t key_offset_ = 0;
  uint32_t key_size_ = 0;
  bool latency_ = false;
  // The Latency fast path may run: out_rings_ is set, and the source has
  // neither failed nor closed (each ring's `fast` says whether it takes part).
  bool fast_open_ = false;
  OutRing* out_rings_ = nullptr;  // [target]
  RouteFn route_fn_;
  // Replicate flows: every record is copied into lanes_[fan_[0..num_fan_)],
  // which all fill in lockstep (one lane per shm target, one shared staging
  // lane for all ofi targets).
  bool replicate_ = false;
  const uint32_t* fan_ = nullptr;
  uint32_t num_fan_ = 0;
  // The byte length of the record whose room reserve() is asked for, set
  // on the slow path only, so that a refusal names the record's own size
  // rather than its framed one.
  size_t record_bytes_ = 0;
};

// The inline push of a replicate flow: room in one lane means room in all
// (they fill in lockstep); `write(dst)` copies one record of `stride` bytes.
template <class Write>
inline Status replicate_write(SourceCore* c, size_t stride, size_t record_bytes, Deadline deadline,
                              bool try_only, Write&& write) {
  const Lane& first = c->lanes_[c->fan_[0]];
  if (static_cast<size_t>(first.end - first.cur) < stride) [[unlikely]] {
    c->record_bytes_ = record_bytes;
    Status s = c->reserve(SourceCore::kAllTargets, stride, deadline, try_only);
    if (s != Status::kOk) return s;
  }
  for (uint32_t i = 0; i < c->num_fan_; ++i) {
    Lane& lane = c->lanes_[c->fan_[i]];
    write(lane.cur);
    lane.cur += stride;
  }
  if (c->latency_) [[unlikely]]
    return c->publish(SourceCore::kAllTargets, deadline, try_only);
  return Status::kOk;
}

// The inline push of one record of N bytes in Latency mode: writes it into
// target t's ring as a segment of its own and publishes it, if the fast
// path covers that ring and it has credit. False: nothing was written, the
// slow path must push it.
template <size_t N>
[[gnu::always_inline]] inline bool push_fast(SourceCore* c, uint32_t t, const void* rec) {
  if (!c->fast_open_) return false;
  OutRing& o = c->out_rings_[t];
  if (o.fast == nullptr || o.k >= o.limit) return false;
  std::byte* seg = o.fast + (o.k & o.slot_mask) * o.stride;
  copy_record<N>(seg, rec);
  std::byte* foot = seg + o.footer;
  const uint64_t word = uint64_t{N} | uint64_t{kFastConsumable} << 32;  // bytes_used, flags
  std::memcpy(foot, &word, sizeof(word));
  ++o.k;
  ++o.fast_published;
  // The publication (layout.h): the record and the footer are visible no
  // later than seq. Sequentially consistent, as are the load of `waiting`
  // and the parking target's fence between its store of `waiting` and its
  // last look at seq (shm_ring.h): one of the two sees the other's store,
  // so no wake-up is lost. On x86 this is one locked exchange, cheaper
  // than a release store and a fence.
  reinterpret_cast<std::atomic<uint64_t>*>(foot + kFastFooterSeqOffset)
      ->store(o.k, std::memory_order_seq_cst);
  if (o.target_waiting->load(std::memory_order_seq_cst) != 0) [[unlikely]]
    c->wake_target(t);
  return true;
}

// The most targets a run push keeps its lanes for in registers and on the
// stack; a flow with more pushes a run one record at a time.
inline constexpr uint32_t kMaxRunTargets = 64;

// Source<T>::push(span): `n` records of kStride bytes at `recs`, in order,
// as n single pushes would do it, but with the flow's fields and the lanes
// read once per run instead of once per record (a single push reloads them
// all after its memcpy, which may alias anything). One target: one memcpy
// per segment. Replicate flows: one memcpy per lane and segment. Latency
// mode and explicit routing go one record at a time through `one(i)` (the
// single push). *pushed says how many went, a prefix, whatever the status.
//
// `to` (Source<T>::push_to(targets, records)) names each record's target
// instead of the flow's routing; null: the flow routes.
template <size_t kStride, class One>
Status push_run(SourceCore* c, const std::byte* recs, const uint32_t* to, size_t n,
                Deadline deadline, bool try_only, size_t* pushed, One&& one) {
  size_t i = 0;
  const uint32_t nt = c->num_targets_;
  const bool one_by_one = c->latency_ || (c->replicate_ && to != nullptr) ||
                          (!c->replicate_ && ((to == nullptr && c->route_ == Route::kExplicit) ||
                                              nt > kMaxRunTargets || (nt > 1 && n < nt)));
  if (one_by_one) [[unlikely]] {
    for (; i < n; ++i) {
      if (Status s = one(i); s != Status::kOk) {
        *pushed = i;
        return s;
      }
    }
    *pushed = n;
    return Status::kOk;
  }
  if (c->replicate_ || (nt == 1 && to == nullptr)) {
    // Every lane written fills in lockstep, so the first one's room is all
    // lanes' room: copy as much of the run as fits, then claim new segments.
    static constexpr uint32_t kLaneZero = 0;
    const uint32_t* fan = c->replicate_ ? c->fan_ : &kLaneZero;
    const uint32_t num_fan = c->replicate_ ? c->num_fan_ : 1;
    Lane* lanes = c->lanes_;
    while (i < n) {
      Lane& first = lanes[fan[0]];
      const size_t room = static_cast<size_t>(first.end - first.cur) / kStride;
      if (room == 0) {
        Status s =
            c->reserve(c->replicate_ ? SourceCore::kAllTargets : 0, kStride, deadline, try_only);
        if (s != Status::kOk) {
          *pushed = i;
          return s;
        }
        continue;
      }
      const size_t k = room < n - i ? room : n - i;
      for (uint32_t f = 0; f < num_fan; ++f) {
        Lane& lane = lanes[fan[f]];
        std::memcpy(lane.cur, recs + i * kStride, k * kStride);
        lane.cur += k * kStride;
      }
      i += k;
    }
    *pushed = n;
    return Status::kOk;
  }
  // Shuffle to several targets: the lanes live in a local copy while the
  // run is copied (nothing the ring writes can alias it), written back
  // before anything else may look at them.
  Lane lanes[kMaxRunTargets];
  for (uint32_t t = 0; t < nt; ++t) lanes[t] = c->lanes_[t];
  const bool key8 =
      c->route_ == Route::kHashKey && c->key_size_ == 8 && c->key_offset_ + 8 <= kStride;
  const size_t key_offset = c->key_offset_;
  Status s = Status::kOk;
  while (i < n) {
    const std::byte* rec = recs + i * kStride;
    uint32_t t;
    if (to != nullptr) {
      t = to[i];
      if (t >= nt) [[unlikely]] {
        for (uint32_t u = 0; u < nt; ++u) c->lanes_[u] = lanes[u];
        *pushed = i;
        return c->fail_invalid("target index out of range in push_to(targets, records)");
      }
    } else if (key8) [[likely]] {
      uint64_t k;
      std::memcpy(&k, rec + key_offset, 8);
      t = reduce(mix64(k), nt);
    } else {
      t = c->route(rec, kStride);
    }
    Lane& lane = lanes[t];
    if (static_cast<size_t>(lane.end - lane.cur) < kStride) [[unlikely]] {
      for (uint32_t u = 0; u < nt; ++u) c->lanes_[u] = lanes[u];
      s = c->reserve(t, kStride, deadline, try_only);
      for (uint32_t u = 0; u < nt; ++u) lanes[u] = c->lanes_[u];
      if (s != Status::kOk) break;
      continue;
    }
    std::memcpy(lane.cur, rec, kStride);
    lane.cur += kStride;
    ++i;
  }
  for (uint32_t t = 0; t < nt; ++t) c->lanes_[t] = lanes[t];
  *pushed = i;
  return s;
}

// One published segment as a target sees it.
struct SegmentView {
  const std::byte* data = nullptr;
  uint32_t bytes = 0;
  uint32_t source = 0;    // index into the flow's sources()
  uint64_t sequence = 0;  // ordered replicate flows: the batch's sequence number
};

class TargetCore : public Waitable {
 public:
  ~TargetCore() override = default;
  // Releases the previous segment and returns the next one with records.
  // kOk: *out is set. kEndOfFlow / kTimeout / kPeerLost otherwise.
  virtual Status next(Deadline deadline, SegmentView* out) = 0;
  // The fast path released enough of ring s to hand credit back.
  virtual void return_credit_fast(uint32_t /*s*/) {}
  // Target::keep(): the segment the last next() handed out stays where it
  // is after later calls, until release_kept(the id returned); 0 if none is
  // held. Target::release(): gives a kept segment back (its ring's credit
  // returns in ring order, once every earlier segment of it is released).
  virtual uint64_t keep_held() { return 0; }
  virtual void release_kept(uint64_t /*id*/) {}

  // The Latency fast path (next_fast): set by a target whose rings are all
  // local, of an unordered flow with one record size; null otherwise.
  FastIn* fast_ = nullptr;  // [source]
  uint32_t fast_n_ = 0;     // sources
  uint32_t turn_ = 0;       // the ring the next scan starts at (fairness)
  int32_t fast_held_ = -1;  // the ring whose segment k - 1 is handed out, or -1
  uint32_t fast_credit_batch_ = 1;
  uint32_t fast_spin_ = 0;  // polls before the slow path waits
  bool fast_spun_ = false;  // the inline path spun already: the slow path need not
  uint64_t fast_word_ = 0;  // the footer's first word of a one-record segment
  // Where a segment's tail publication word is (latency_tail_offset in
  // src/flow/flow_core.h; the record's last 8 bytes), or 0: the footer's
  // seq alone publishes.
  uint32_t fast_tail_ = 0;
  virtual const std::string& error() const = 0;
  // After kPeerLost: the peer it is about, if one is known.
  virtual std::optional<LostPeer> lost_peer() const { return std::nullopt; }
  // Records handed out from source s (Target::received).
  virtual uint64_t received(uint32_t /*s*/) const { return 0; }
  // After kGap: the sequence number that never arrived.
  virtual uint64_t gap() const { return 0; }
  // The flow's name and this target's slot on its rank (Worker::failure).
  virtual std::string flow_name() const { return {}; }
  virtual uint32_t slot() const { return 0; }
};

// Whether the segment at `seg`, ring r's next, is published by its footer's
// seq (acquire: pairs with the source's release store, layout.h), and the
// footer's first word (bytes_used | flags << 32), read after that.
[[gnu::always_inline]] inline bool seq_published(const FastIn& r, const std::byte* seg) {
  return reinterpret_cast<const std::atomic<uint64_t>*>(seg + r.footer + kFastFooterSeqOffset)
             ->load(std::memory_order_acquire) == r.k + 1;
}
[[gnu::always_inline]] inline uint64_t footer_word(const FastIn& r, const std::byte* seg) {
  uint64_t word;
  std::memcpy(&word, seg + r.footer, sizeof(word));
  return word;
}

// One pass of the fast path over the rings, from turn_: takes the first
// segment that holds exactly one record (its footer alone proves it well
// formed, or, where tails publish, its last word): kFastTaken. kFastNone if
// none is published yet; kFastSlow if the one at a head needs the slow path
// (END, empty, anything else).
//
// `poll` counts the passes of one call from 1: where tails publish, the
// footers' seq (for a record ending in kFastTailEmpty, END) is looked at on
// every kFastSeqEvery-th pass only, so that the target does not pull the
// footer's line away from the source while the source writes it.
inline constexpr uint32_t kFastSeqEvery = 16;
enum FastTake { kFastNone, kFastTaken, kFastSlow };
[[gnu::always_inline]] inline FastTake take_fast(TargetCore* c, SegmentView* out, uint32_t poll) {
  const uint32_t n = c->fast_n_;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t s = c->turn_ + i;
    if (s >= n) s -= n;
    FastIn& r = c->fast_[s];
    const std::byte* seg = r.segments + (r.k & r.slot_mask) * r.stride;
    uint32_t bytes;
    if (c->fast_tail_ != 0) {
      // A record and its footer on two lines: the record's last word,
      // polled in the record's own line, publishes it (acquire: pairs with
      // copy_record's release). One line crosses between the cores
      // instead of two. A record whose last word is kFastTailEmpty is
      // found by its footer below.
      const uint64_t tail =
          std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(seg + c->fast_tail_))
              .load(std::memory_order_acquire);
      bytes = c->fast_tail_ + 8;
      if (tail == kFastTailEmpty) [[unlikely]] {
        if (poll % kFastSeqEvery != 0 || !seq_published(r, seg)) continue;
        if (footer_word(r, seg) != c->fast_word_) return kFastSlow;
      }
    } else {
      // Otherwise a record whose footer is on a line of its own (over 48
      // B) is two lines the source writes: asking for the record's line
      // on every poll fetches it beside the footer's instead of after it
      // (64 B round trip 0.42 -> 0.34 us in a two-process test of this
      // layout). A prefetch, not a load: it neither waits nor orders
      // anything.
      const bool published = seq_published(r, seg);
      __builtin_prefetch(seg);
      if (!published) continue;
      const uint64_t word = footer_word(r, seg);
      if (word != c->fast_word_) return kFastSlow;
      bytes = static_cast<uint32_t>(word);
    }
    ++r.k;
    ++r.taken;
    c->fast_held_ = static_cast<int32_t>(s);
    c->turn_ = s + 1 == n ? 0 : s + 1;
    *out = SegmentView{seg, bytes, s, 0};
    return kFastTaken;
  }
  return kFastNone;
}

// The rest of next_fast once its first pass found nothing ready: spins
// (unless `deadline` has passed, as for try_consume), then the slow path.
// Out of line, so that the first pass inlines small: a wait costs more
// than the call.
[[gnu::noinline]] inline Status next_fast_wait(TargetCore* c, Deadline deadline, SegmentView* out,
                                               FastTake got) {
  if (got == kFastNone && deadline != Deadline::min()) {
    for (uint32_t i = 2; i <= c->fast_spin_ + 1; ++i) {
      cpu_relax();
      got = take_fast(c, out, i);
      if (got == kFastTaken) return Status::kOk;
      if (got == kFastSlow) break;
    }
    c->fast_spun_ = got == kFastNone;
  }
  return c->next(deadline, out);
}

// TargetCore::next() through the fast path: releases the segment it handed
// out, takes a published one-record segment, and (unless `deadline` has
// passed, as for try_consume) polls the rings for a while; whatever else
// happens is the slow path's.
inline Status next_fast(TargetCore* c, Deadline deadline, SegmentView* out) {
  if (c->fast_held_ >= 0) {
    FastIn& r = c->fast_[c->fast_held_];
    c->fast_held_ = -1;
    if (c->fast_tail_ != 0)
      empty_tail(r.segments + ((r.k - 1) & r.slot_mask) * r.stride, c->fast_tail_);
    if (++r.released - r.published >= c->fast_credit_batch_) [[unlikely]]
      c->return_credit_fast(static_cast<uint32_t>(&r - c->fast_));
  }
  // Pass 1 first: a tail-published ring's footer is not read until pass
  // kFastSeqEvery (what only seq publishes is rare: END, a record ending in
  // kFastTailEmpty; the slow path, which reads seq, finds it sooner when
  // the spin ends first).
  const FastTake got = take_fast(c, out, 1);
  if (got == kFastTaken) [[likely]]
    return Status::kOk;
  return next_fast_wait(c, deadline, out, got);
}

// True if [data, data+bytes) is a well-formed sequence of byte records (every
// length fits in what is left). Targets check every segment before handing
// it out, so a corrupt or hostile segment can never make iteration overrun.
bool validate_records(const std::byte* data, uint32_t bytes);

// A RecordBatch over `bytes` bytes of records at `data`, which should have
// passed validate_records() (iteration stays inside them either way). For the
// transports and unit tests; applications get batches from Target<Bytes>.
inline RecordBatch make_record_batch(const std::byte* data, uint32_t bytes);

// The handle (flow.h) over a core, whose constructor from a core is private:
// for Cluster (cluster.h), which opens the cores, and the tests' in-process
// flows; applications get their ends from Cluster::source and
// Cluster::target. Defined in flow.h. REQUIRES: `core` is not null.
template <class T>
Source<T> source_from_core(std::unique_ptr<SourceCore> core);
template <class T>
Target<T> target_from_core(std::unique_ptr<TargetCore> core);

// The end of a Source's or Target's handle: a core is destroyed at once,
// never waiting for the network; what its end still needs from it (an ofi
// source's last transfers, abort messages, an endpoint's close) is handed
// to its Cluster, which finishes it in the background (Cluster::leave()
// waits for that). The handles own their cores through SourceOwner and
// TargetOwner, whose deleters call these.
void release_source(std::unique_ptr<SourceCore> core) noexcept;
void release_target(std::unique_ptr<TargetCore> core) noexcept;
struct ReleaseSource {
  void operator()(SourceCore* core) const noexcept {
    release_source(std::unique_ptr<SourceCore>(core));
  }
};
struct ReleaseTarget {
  void operator()(TargetCore* core) const noexcept {
    release_target(std::unique_ptr<TargetCore>(core));
  }
};
using SourceOwner = std::unique_ptr<SourceCore, ReleaseSource>;
using TargetOwner = std::unique_ptr<TargetCore, ReleaseTarget>;

}  // namespace detail
}  // namespace sluice
SLUICE_API_END
