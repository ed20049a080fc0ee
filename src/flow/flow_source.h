// The source half of a flow (SourceCore), one class per flow kind. It fills
// segments of its rings (shm: straight into the target's ring; ofi: a
// staging segment moved by RMA write or message), publishes them, waits for
// credit, and closes.
//
//   FlowSource       what every kind shares: rings, lanes, credit, waiting,
//                    abort, the ofi side (flow_source.cc, flow_source_ofi.cc)
//   ShuffleSource    routes each record to one target; a lost target fails
//                    the source (flow_source_shuffle.cc)
//   ReplicateSource  fills every target's segment in lockstep, numbered by a
//                    sequencer when ordered; a lost target leaves the
//                    fan-out and the source goes on for the others
//                    (flow_source_replicate.cc)
//
// A kind decides per segment or per call (reserve, publish, flush, close,
// what a lost target means), never per record: the push path that writes
// records is inline in flow.h and reads only SourceCore's fields, which the
// kind sets up at construction. make_source (flow_core.cc) picks the kind.
//
// Thread safety: owned by one thread (see flow.h); the rings and words it
// shares with targets are synchronised as layout.h describes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flow/completion.h"
#include "flow/failure_state.h"
#include "flow/flow_core.h"
#include "flow/linger.h"
#include "flow/parking.h"
#include "flow/wait_set.h"
#include "sluice/flow.h"
#include "transport/ofi_ring.h"
#include "transport/shm_ring.h"
#include "wire/layout.h"

namespace sluice::detail {

// The sequence number of an ordered segment without records (an END alone).
inline constexpr uint64_t kNoSequence = ~uint64_t{0};
// How long close() drives an ofi source's endpoint before returning.
inline constexpr auto kCloseFlush = std::chrono::milliseconds(100);
// Replicate flows: how long a transport error waits for the registry to
// confirm that the target's rank is gone before it fails the source.
inline constexpr auto kLossConfirmation = std::chrono::milliseconds(2000);
// How long a destroyed ofi source lingers (on the Cluster's Linger) for its
// last transfers after a successful close().
inline constexpr auto kLinger = std::chrono::milliseconds(5000);

// What every kind of source shares. Not a source by itself: a kind
// implements reserve, publish, flush, close and drop_if_lost.
class FlowSource : public SourceCore, protected FailureState {
 public:
  // REQUIRES: the kind's destructor called retire().
  ~FlowSource() override;

  void abort() override;

  Status wait_delivered(Deadline deadline) override;
  // Closed successfully, with transfers or confirmations still to come: a
  // destroyed handle parks it on the Linger (release_source).
  bool lingers() const;
  // Destroying it now would send its abort messages over ofi and drive the
  // endpoint until they left (at most kAbortFlush): release_source destroys
  // it on the Linger.
  // (Or close its ofi endpoint, milliseconds over tcp; or let an ordered
  // flow's sequencer handle say goodbye to its owner.)
  bool ends_with_wait() const { return ctx_->spec.ordered() || ofi_ != nullptr; }
  // Its end was given up (the Cluster ended without leave()): destroying it
  // posts its abort messages but does not wait for them to leave.
  void give_up_end() { end_given_up_ = true; }
  Linger* linger() const { return ctx_->linger; }
  const FlowContext* context() const { return ctx_; }
  std::string name() const { return ctx_->endpoint_name(true, index_); }

  Status fail_invalid(const char* what) override;

  const std::string& error() const override { return error_; }
  std::optional<LostPeer> lost_peer() const override { return FailureState::lost_peer(ctx_); }
  uint64_t delivered(uint32_t t) override;

  // A Worker parks on the ring it last found without credit (shm: its
  // credit futex) and on this endpoint's completion queue (ofi).
  bool arm(WaitSet& set) override;
  void disarm() override;
  void wait_alone(std::chrono::milliseconds timeout) override;

  // Over ofi, a Worker drives the endpoint between calls: until the source
  // failed, or closed with every transfer complete and every live target's
  // confirmation of the END in.
  bool drive() override;
  bool delivering() const override {
    return ofi_ != nullptr && closed_ && failed_ == Status::kOk && transfers_busy();
  }
  void arm_driven(WaitSet& set) override;
  void wake_target(uint32_t t) override;
  void count_wait(std::chrono::nanoseconds waited) override {
    counters::add(stats_->credit_waits, 1);
    counters::add(stats_->credit_wait_ns, static_cast<uint64_t>(waited.count()));
  }

 protected:
  // Every lane starts as its target's own (lane_of_[t] == t); a kind may
  // share lanes among targets in its constructor.
  FlowSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings,
             std::unique_ptr<OfiSource> ofi);

  // The end of the source's life, which every kind's destructor runs first
  // (it may call the kind's drop_if_lost, which the base destructor no longer
  // can). Never waits: after a successful close(), what is not yet confirmed
  // is given up on (with a warning; the Linger waited for it where there was
  // one). Otherwise: tells every target that this source ends without END.
  // Then closes (or abandons) the endpoint.
  void retire();

  // A target's ring as this source fills it (flow_cores.h: the inline
  // Latency push shares it).
  using Out = OutRing;

  // Target t is gone: true if the source goes on without it (and from now
  // on leaves it out), false if that fails the source. After a transport
  // error (`broken`) the registry usually confirms the peer's death within
  // moments: a kind that may drop the target waits for it a little.
  virtual bool drop_if_lost(uint32_t t, bool broken) = 0;

  // FailureState::fail_for_good, and every later write is refused: the
  // lanes (and the inline Latency path) close, so that a push into a target
  // whose segment still has room reaches reserve() and reports the failure
  // rather than succeed on a source that failed (as after abort()).
  Status fail_for_good(std::string message, uint32_t rank = kNoRank);

  Lane& lane(uint32_t t) { return lanes_[lane_of_[t]]; }
  bool live(uint32_t t) const { return !out_[t].dropped; }
  // Target t's ring has room for the next segment now (no waiting).
  bool has_room(uint32_t t) { return has_credit(t); }
  bool has_ofi() const { return ofi_ != nullptr; }

  // What reserve() checks before any kind claims room: the source has not
  // failed or closed, and a record of `bytes` fits a segment. kOk, or why not.
  Status admit(size_t bytes) {
    if (failed_ != Status::kOk || closed_ || bytes + prefix_ > ctx_->payload_bytes) [[unlikely]]
      return refuse(bytes);
    return Status::kOk;
  }

  // Payload bytes of target t's segment being filled, the prefix included.
  uint32_t used_bytes(uint32_t t) { return static_cast<uint32_t>(lane(t).cur - out_[t].base); }

  void start_segment(uint32_t t) {
    Out& o = out_[t];
    o.base = rings_[t].ring.payload(o.k);
    o.filling = true;
    lane(t).cur = o.base + prefix_;
    lane(t).end = o.base + ctx_->payload_bytes;
  }

  Status publish_segment(uint32_t t, uint32_t used, uint32_t flags, Deadline deadline = kForever,
                         bool try_only = false);

  // Writes segment k's footer (the publication itself, on shm).
  void mark_published(uint32_t t, uint32_t used, uint32_t flags) {
    Out& o = out_[t];
    const OutRingRef& r = rings_[t];
    layout::Footer* f = r.ring.footer(o.k);
    f->bytes_used = used;
    f->flags = layout::kConsumable | flags;
    const uint32_t size = ctx_->spec.record_size();
    seg_records_[t * ctx_->ring_segments + o.k % ctx_->ring_segments] =
        size != 0 ? (used - prefix_) / size : count_records(o.base + prefix_, used - prefix_);
    if (!r.remote) {
      shm_ring::publish(f, o.k + 1, r.bell);
    } else {
      // The target learns of the segment from its completion, never from
      // the bytes: a NIC may place them in any order.
      f->seq.store(o.k + 1, std::memory_order_relaxed);
    }
    ++o.k;
    o.filling = false;
    lane(t).cur = lane(t).end = nullptr;
  }

  // Ordered replicate flows whose every target is remote number their
  // segments when they are handed to the provider, a run at a time
  // (ReplicateSource::number_pending); post_pending then posts them
  // whatever its deadline, as a number taken must reach every target.
  virtual Status number_pending() { return Status::kOk; }
  bool numbers_on_post_ = false;
  // ofi: how many published full segments wait to go together (post_if_due).
  uint32_t post_batch_ = 1;

  // Segments published because they are full (from reserve) wait for a
  // few more to go in one write; flush() posts what waits, and END and
  // Latency-mode segments go at once.
  Status post_if_due(uint32_t t, uint32_t flags, Deadline deadline, bool try_only);

  // Hands the published, unsent segments of target t to the provider: one
  // RMA write per run of consecutive slots (one message each on the message
  // path). On kWouldBlock / kTimeout nothing is lost: they are retried by
  // the next reserve, flush or close.
  Status post_pending(uint32_t t, Deadline deadline, bool try_only);

  // post_pending for every live ofi target with published, unsent segments.
  Status post_all_pending(Deadline deadline);

  // Why target t can no longer be delivered to (its rank is lost, or the
  // target was destroyed before this source's END), or empty.
  std::string target_lost(uint32_t t) const;
  std::string target_destroyed_reason(uint32_t t) const;
  // Target t's abort word (layout::abort_word), 0 while it has not aborted.
  uint32_t target_aborted(uint32_t t) const;

  // (Unlike a target, a source that fails for good tells its targets only
  // when it is destroyed or aborted: told at once, an ordered flow's
  // targets went on without it while its process still held its own
  // target, and system.faults_test's
  // LosingTheSequencerOwnerFailsTheSourcesOnEveryTransport hung 1 run in 8.)

  // Target t is gone for `why`: the source goes on without it if the kind
  // drops it (drop_if_lost), and fails for good otherwise.
  Status lost_target(uint32_t t, const std::string& why);

  // The segment transfers from target t's staging slots will never
  // complete (the target was dropped): nothing waits for them any more.
  void forget_transfers(uint32_t t);

  // Handles whatever the completion queue holds, without waiting.
  Status progress();

  // Claims target t's next segment once it has credit (waiting unless
  // `try_only`); the caller starts it.
  Status acquire(uint32_t t, Deadline deadline, bool try_only);

  // Marks the source closed once the last segments are handed over; over
  // ofi, first drives the endpoint briefly (see flow_source.cc).
  Status finish_close(Deadline deadline);

  const FlowContext* ctx_;
  OpenCore open_{ctx_};  // counts this core in ctx_->open_cores (Cluster's destroy checks it)
  uint32_t index_;
  std::vector<OutRingRef> rings_;
  std::vector<Out> out_;
  std::vector<uint32_t> lane_of_;  // [target]: the lane its records go through
  uint32_t prefix_ = 0;            // ordered flows: the sequence number at the head of each segment
  bool closed_ = false;
  // When a Worker parked on this source must ask it again although nothing
  // changed: a replicate source that skips full targets stops waiting for
  // one then (kForever: never).
  Deadline skip_wake_ = kForever;

 private:
  static constexpr uint32_t kNotArmed = ~0u;

  // admit()'s verdict when something is wrong.
  Status refuse(size_t bytes);

  // Tells every target that this source ends without END: a ring-header
  // word (shm), an abort message (ofi). Once: from abort() or retire().
  void signal_abort();

  bool sent_by(const Completion& c, fi_addr_t peer) const {
    return sent_by_peer(*ofi_->ep, c, peer);
  }

  Status post_range(uint32_t t, uint64_t k, uint32_t slot, uint32_t count, Deadline deadline,
                    bool try_only);

  // signal_abort()'s remote targets; drives the endpoint for at most
  // kAbortFlush so that the messages leave before it is abandoned.
  void send_aborts();
  bool end_given_up_ = false;  // give_up_end(): send_aborts() does not wait

  void post_credit_receive(uint32_t t);

  std::string lost_suffix(uint32_t rank) const;

  void handle(const Completion& c);

  // A failed operation. A credit receive cancelled because a finished
  // target went away costs nothing; a failed segment transfer fails the flow.
  Status on_cq_error(const std::string& err, void* failed);

  auto cq_handler() {
    return [this](const Completion& c) {
      handle(c);
      return true;
    };
  }
  auto cq_error_handler() {
    return [this](const std::string& err, void* failed) { return on_cq_error(err, failed); };
  }

  bool all_remote_ended() const;

  // Blocks on the completion queue for at most a park slice.
  Status park(Deadline deadline, std::chrono::milliseconds slice = kParkSlice);

  std::string lost_targets() const;

  // `drive`: over ofi, read the completion queue first when no credit is
  // known (a system call on tcp, whose progress is manual): a spinning
  // caller does so only now and then.
  bool has_credit(uint32_t t, bool drive = true) {
    Out& o = out_[t];
    if (!rings_[t].remote) {
      if (o.k < o.limit) return true;
      o.limit = shm_ring::consumed(rings_[t].ring) + ctx_->ring_segments;
      note_fill(o);
      count_delivered(t);
      return o.k < o.limit;
    }
    // Over ofi the staging slot must also be free: its previous segment's
    // transfer has completed.
    const uint32_t S = ctx_->ring_segments;
    auto ready = [&] { return o.k < o.limit && !ops_[t * S + o.k % S].busy; };
    if (ready()) return true;
    if (drive) (void)progress();
    o.limit = credit_seen_[t] + S;
    note_fill(o);
    count_delivered(t);
    return ready();
  }
  // Adds the records of the segments target t consumed since last time
  // (o.limit - S: the count just learnt) to what it was delivered. Called
  // whenever o.limit moves, so before a freed slot's count is overwritten
  // (a slot is reused only once the source knows it was consumed).
  void count_delivered(uint32_t t) {
    const uint32_t S = ctx_->ring_segments;
    Delivered& d = delivered_[t];
    for (const uint64_t consumed = out_[t].limit - S; d.segments < consumed; ++d.segments)
      d.records += seg_records_[t * S + d.segments % S];
  }
  // The ring's fill as just learnt (segments claimed, not yet consumed).
  void note_fill(const Out& o) {
#ifndef SLUICE_NO_COUNTERS
    stats_->ring_fill.store(o.k + ctx_->ring_segments - o.limit, std::memory_order_relaxed);
#else
    (void)o;
#endif
  }

  Status wait_for_credit(uint32_t t, Deadline deadline);
  // The counters say that this source waits for target t's credit, since
  // the first call of a wait (Slot::waiting_peer); clear_waiting() once it
  // has credit again. Both off the fast path: at most once per segment.
  void mark_waiting(uint32_t t) {
    if (waiting_marked_ && waiting_for_ == t) return;
    waiting_marked_ = true;
    waiting_for_ = t;
    stats_->waiting_peer.store(uint64_t{t} + 1, std::memory_order_relaxed);
    stats_->waiting_since_ns.store(counters::now_ns(), std::memory_order_release);
  }
  void clear_waiting() {
    waiting_marked_ = false;
    stats_->waiting_since_ns.store(0, std::memory_order_release);
  }
  bool waiting_marked_ = false;
  uint32_t waiting_for_ = 0;

  // Waits until every live remote target has confirmed that all our
  // segments arrived (kEndConfirmed), the deadline passes or one is lost.
  // Only then may the endpoint close: over tcp, closing while a target still
  // sends credit resets the connection, and what the target had not yet
  // taken from it is lost.
  Status await_confirmations(Deadline deadline);

  // Waits until every ofi transfer has completed.
  Status drain(Deadline deadline);
  // True while an ofi segment transfer has not completed.
  bool transfers_busy() const;
  // True once every live remote target has confirmed our END (or ended
  // before it).
  bool all_confirmed() const;

  std::vector<Lane> lane_store_;  // SourceCore::lanes_
  // Test hooks (common/test_hooks.h): 0 in the installed library.
  uint64_t test_eagain_every_ = 0;  // refuse every n-th post once
  uint64_t test_posts_ = 0;
  uint32_t wire_index_ = 0;  // the index segments carry: index_, unless a test hook forges it
  uint32_t wait_target_ = kNotArmed;  // the target whose ring last had no credit
  uint32_t armed_ = kNotArmed;        // the ring whose source_waiting a Worker set
  bool aborted_ = false;
  // ofi only.
  std::vector<Op> ops_;         // [target * S + slot]: the segment transfer from that staging slot
  std::vector<Op> credit_ops_;  // [target]: the posted credit receive (message path)
  std::vector<Op> abort_ops_;  // [target]: the posted abort receive; [num_targets]: our abort sends
  std::vector<uint32_t>
      target_aborted_;                  // [target]: its abort word (layout::abort_word), 0 if none
  std::vector<uint8_t> end_confirmed_;  // [target]: it told us all up to our END arrived
  std::vector<uint64_t> credit_seen_;   // [target]: highest consumed count heard of
  // Source::delivered: per target, the segments known consumed and their
  // records; seg_records_[t * S + k % S] is segment k's record count.
  struct Delivered {
    uint64_t segments = 0;
    uint64_t records = 0;
  };
  std::vector<Delivered> delivered_;
  std::vector<uint32_t> seg_records_;
  uint32_t coalesce_ = 1;  // ofi RMA: most segments moved by one write
  CompletionReader cq_;
  std::unique_ptr<OfiRing> wire_;  // how segments and credit cross the endpoint
  // Declared last, so destroyed first (retire() closes it even earlier):
  // closing the endpoint may still touch the contexts (ops_) of operations
  // in flight.
  std::unique_ptr<OfiSource> ofi_;
};

inline Status FlowSource::progress() {
  return cq_.drain(*ofi_->ep, cq_handler(), cq_error_handler());
}

// publish_segment and acquire are defined here, so that the kinds' reserve
// and publish (once per record in Latency mode) can inline their fast paths.
inline Status FlowSource::publish_segment(uint32_t t, uint32_t used, uint32_t flags,
                                          Deadline deadline, bool try_only) {
  mark_published(t, used, flags);
  counters::add(stats_->segments, 1);
  counters::add(stats_->bytes, used - prefix_);
  if (!rings_[t].remote) return Status::kOk;
  return post_if_due(t, flags, deadline, try_only);
}

inline Status FlowSource::acquire(uint32_t t, Deadline deadline, bool try_only) {
  if (has_credit(t)) [[likely]] {
    if (waiting_marked_) [[unlikely]]
      clear_waiting();
    return Status::kOk;
  }
  // Before waiting, unsent segments go: the target cannot return credit
  // for what it never got.
  if (rings_[t].remote && out_[t].posted < out_[t].k) {
    if (Status s = post_pending(t, deadline, try_only); s != Status::kOk) return s;
    if (has_credit(t)) return Status::kOk;
  }
  if (failed_ != Status::kOk) return failed_;
  wait_target_ = t;
  if (try_only) {
    // A caller polling with try_push must still learn that the target is
    // gone: back-pressure from a lost target would last forever.
    if (std::string why = target_lost(t); !why.empty()) return lost_target(t, why);
    error_.clear();   // back-pressure needs no message, and building one would allocate
    mark_waiting(t);  // (until a later acquire finds credit)
    return Status::kWouldBlock;
  }
  return wait_for_credit(t, deadline);
}

// Shuffle flows: each record goes to the one target it is routed to, and
// each target's segment fills, publishes and claims on its own.
class ShuffleSource final : public FlowSource {
 public:
  ShuffleSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings,
                std::unique_ptr<OfiSource> ofi);
  ~ShuffleSource() override;

  Status reserve(uint32_t t, size_t bytes, Deadline deadline, bool try_only) override;
  Status publish(uint32_t t, Deadline deadline, bool try_only) override;
  Status flush(Deadline deadline) override;
  Status close(Deadline deadline) override;

 private:
  // Records routed to a lost target cannot be delivered: never dropped.
  bool drop_if_lost(uint32_t, bool) override { return false; }

  // Counts what the inline Latency push published towards target t.
  void count_fast(uint32_t t);
};

// Replicate flows: every record goes to every target. One lane per shm
// target (records go straight into its ring), and one staging lane shared by
// every ofi target: each segment is written once and moved to each of them
// from the same staging slot. All lanes fill in lockstep.
class ReplicateSource final : public FlowSource {
 public:
  // REQUIRES: `sequencer` is set iff the flow is ordered.
  ReplicateSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings,
                  std::unique_ptr<OfiSource> ofi, std::unique_ptr<Sequencer> sequencer);
  ~ReplicateSource() override;

  // `t` is always kAllTargets: flow.h pushes a replicate flow's records
  // through replicate_write(), into every lane at once.
  Status reserve(uint32_t t, size_t bytes, Deadline deadline, bool try_only) override;
  Status publish(uint32_t t, Deadline deadline, bool try_only) override;
  Status flush(Deadline deadline) override;
  Status close(Deadline deadline) override;

 private:
  // A lost target leaves the fan-out and the source goes on for the others
  // (close() then reports it). True if `t` was dropped.
  bool drop_if_lost(uint32_t t, bool broken) override;

  // Every target in the segment being filled fills in lockstep, so any
  // one speaks for all in lockstep decisions (filling, ended, bytes used).
  // A dropped target's state froze when it was dropped, and a skipped one
  // (skip_full_targets_after) has no segment, so neither ever does.
  uint32_t rep() const {
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (in_segment(t)) return t;
    }
    return 0;  // every target dropped: the source has failed for good
  }
  // Target t takes part in the segment being filled (or the next claimed):
  // live, and not skipped for want of room.
  bool in_segment(uint32_t t) const { return live(t) && skipped_[t] == 0; }

  // The claim of the next segment of an ordered flow that may skip full
  // targets (skip_full_targets_after): every live target with room, and
  // one without room only while it has been full for less than the limit;
  // the others miss the segment. If every live target is past the limit,
  // it waits for all as reserve_all does.
  Status claim_skipping(Deadline deadline, bool try_only);
  // The lanes of the targets in the segment, for the inline push (fan_).
  void refan();

  // acquire() for a target, which may be dropped instead.
  Status acquire_live(uint32_t t, Deadline deadline, bool try_only);
  // acquire_live() for every target in turn (one past the deadline or
  // without room under try_only stops it: retried, it goes on from there).
  Status acquire_all(Deadline deadline, bool try_only);

  // Every lane fills in lockstep, so they publish and claim segments
  // together: a segment is published on every target's ring (with one
  // sequence number when ordered), then the next is claimed on all once
  // every target has credit. Each step may be retried after kWouldBlock
  // or kTimeout without losing lockstep.
  Status reserve_all(Deadline deadline, bool try_only);

  // Publishes the segment being filled on every target (all hold `used`
  // bytes), then hands the ofi ones to the provider.
  Status publish_all(uint32_t used, uint32_t flags, Deadline deadline, bool try_only);

  // Takes `count` sequence numbers (the first in *first) with one
  // fetch-and-add; a failure fails the source for good.
  Status take_numbers(uint64_t count, uint64_t* first);

  // Ordered, every target remote: gives the published segments not yet
  // numbered their sequence numbers, with one fetch-and-add for the run.
  Status number_pending() override;

  std::vector<uint32_t> fan_store_;  // the lanes every record is copied to (SourceCore::fan_)
  // skip_full_targets_after: the limit (zero: never skip), and per target
  // whether it misses the segment being filled, since when it has had no
  // room (kForever: it has room), and the segments it missed in a row.
  Clock::duration skip_after_{};
  std::vector<char> skipped_;
  std::vector<Deadline> full_since_;
  std::vector<uint64_t> missed_;
  std::unique_ptr<Sequencer> sequencer_;  // ordered flows only
  std::string dropped_;                   // targets lost and left out
  // Test hook (common/test_hooks.h): 0 in the installed library.
  uint64_t die_after_sequence_ = 0;  // exit after taking this many sequence numbers
  uint64_t sequences_taken_ = 0;
  uint64_t numbered_ = 0;  // number_pending: ring index up to which segments are numbered
};

}  // namespace sluice::detail
