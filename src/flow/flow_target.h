// The target half of a flow (TargetCore), one class per delivery order. It
// reads its rings from every source (shm: published by a release store of
// the footer; ofi: announced by a completion), hands segments out one at a
// time, returns credit, and reports end of flow or a lost source.
//
//   FlowTarget       what every kind shares: rings, arrivals, release and
//                    credit, waiting, the sources' liveness, the ofi side
//                    (flow_target.cc, flow_target_ofi.cc)
//   UnorderedTarget  shuffle and unordered replicate flows: segments in
//                    turn across the rings; a lost source fails the target
//                    (flow_target_unordered.cc)
//   OrderedTarget    ordered replicate flows: segments in sequence-number
//                    order, gaps, and going on without a lost source
//                    (flow_target_ordered.cc)
//
// A kind decides per call of next() (which segment is next, what the end
// of the flow or a stall means) and per lost source, never per record.
// make_target (flow_core.cc) picks the kind.
//
// Thread safety: owned by one thread (see flow.h); the rings and words it
// shares with sources are synchronised as layout.h describes.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flow/completion.h"
#include "flow/failure_state.h"
#include "flow/flow_core.h"
#include "flow/parking.h"
#include "flow/wait_set.h"
#include "sluice/flow.h"
#include "transport/ofi_ring.h"
#include "transport/shm_ring.h"
#include "wire/layout.h"

namespace sluice::detail {

// What every kind of target shares. Not a target by itself: a kind
// implements scan, end_of_flow, go_on_without and check_stalled.
class FlowTarget : public TargetCore, protected FailureState {
 public:
  // REQUIRES: the kind's destructor called retire().
  ~FlowTarget() override;

  Status next(Deadline deadline, SegmentView* out) override;
  void return_credit_fast(uint32_t s) override;
  uint64_t keep_held() override;
  void release_kept(uint64_t id) override;

  const std::string& error() const override { return error_; }
  std::optional<LostPeer> lost_peer() const override { return FailureState::lost_peer(ctx_); }
  uint64_t received(uint32_t s) const override;

  // Destroying it here would drive its ofi endpoint until its abort
  // messages left (at most kAbortFlush), close the endpoint (milliseconds
  // over tcp), or let an ordered flow's sequencer handle say goodbye to its
  // owner: release_target destroys it on the Linger instead.
  bool ends_with_wait() const { return ctx_->spec.ordered() || ofi_ != nullptr; }
  // As FlowSource::give_up_end(): destroying it does not wait for its abort
  // messages to leave.
  void give_up_end() { end_given_up_ = true; }
  const FlowContext* context() const { return ctx_; }
  std::string name() const { return ctx_->endpoint_name(false, index_); }
  std::string flow_name() const override { return ctx_->spec.name(); }
  uint32_t slot() const override { return ctx_->spec.targets()[index_].slot; }

  // A Worker parks on this target's doorbell (shm rings) and completion
  // queue (ofi rings). Something to report (a failure, the end of the flow)
  // is work: no parking then.
  bool arm(WaitSet& set) override;
  void disarm() override;
  void wait_alone(std::chrono::milliseconds timeout) override;

 protected:
  FlowTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
             std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi);

  // The end of the target's life, which every kind's destructor runs first,
  // while the kind's members still live: tells the sources that have not
  // ended that this target is gone, hands back what it holds, returns
  // credit, and closes (or abandons) the endpoint.
  void retire();

  // One pass over the rings: kOk with *out set (the segment is held until
  // the next call), kTimeout if nothing is ready, or an error.
  virtual Status scan(SegmentView* out) = 0;

  // Every ring ended (or its source was gone on without): what next()
  // returns.
  virtual Status end_of_flow() = 0;

  // Source s is gone (`why`) with nothing more published: true if the
  // flow goes on without it (the kind called lose()), false if that fails
  // the target.
  virtual bool go_on_without(uint32_t s, std::string_view why) = 0;

  // Nothing was ready, and the sources' liveness was just checked: kTimeout
  // to go on waiting, or what next() returns now.
  virtual Status check_stalled() = 0;

  // The segment at the head of ring s, past an ordered flow's sequence
  // number: where it lies, its records and flags.
  struct Head {
    uint32_t slot = 0;
    uint32_t used = 0;
    uint32_t flags = 0;
    uint32_t records = 0;  // the records in it (check_segment)
    const std::byte* data = nullptr;
  };

  // kOk with *h if ring s's next segment has arrived and is well formed,
  // kTimeout if it has not arrived, or the error that fails the flow.
  Status head(uint32_t s, Head* h);

  struct In {
    layout::RingView ring;
    uint64_t k = 0;          // next segment to read
    uint64_t released = 0;   // segments finished with
    uint64_t published = 0;  // `released` as last told to the source
    uint64_t arrived = 0;    // remote: segments whose transfer completed here
    uint64_t end_seq = 0;    // remote: the END segment's seq (its count), once it arrived
    uint64_t counted = 0;    // fast path: `k` when the counters last caught up
    uint64_t received = 0;   // records handed out by the slow path (Target::received)
    bool ended = false;
    bool confirmed = false;  // remote: END and all before it arrived, and we said so
    bool remote = false;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    uint64_t credit_addr = 0;
    uint64_t credit_key = 0;
    uint64_t refused = 0;  // remote: arrivals refused after its rank was fenced
  };

  // An arrival on remote ring s whose source's rank the job declared dead
  // (Liveness::fenced): refused (never marked arrived, so never delivered),
  // counted, and logged at the first; false if it may be taken.
  bool refuse_fenced(uint32_t s);

  // Takes ring s's segment at `slot` (segment in.k) off the ring: it is
  // either handed out (held until the next call) or released at once.
  // `used`: the segment's record bytes, for the counters.
  void advance(uint32_t s, In& in, uint32_t flags, uint32_t used);

  // Releases a segment taken off its ring without handing it out.
  void skip(In& in, uint32_t slot);

  // Hands out ring s's segment `h`: it is held until the next call.
  void hold(uint32_t s, const Head& h) {
    held_ = static_cast<int>(s);
    held_slot_ = h.slot;
    in_[s].received += h.records;
  }

  // The flow goes on without source s, which is gone (`why`): its ring
  // counts as ended, and the sources lost are named in lost_.
  void lose(uint32_t s, std::string_view why);

  // Fails for good (FailureState::fail_for_good) and tells the sources
  // that have not ended at once: a failed target takes nothing more, so a
  // source waiting for its credit would otherwise wait until it is
  // destroyed (its rank lives on). Hides the base's, for every kind.
  Status fail_for_good(std::string message, uint32_t rank = kNoRank);

  // The next poll (a consume that never waits) checks the sources and the
  // stall at once, whenever the last one did (see wait()).
  void check_stall_on_next_poll() { next_liveness_ = Deadline::min(); }

  const FlowContext* ctx_;
  OpenCore open_{ctx_};  // counts this core in ctx_->open_cores (Cluster's destroy checks it)
  uint32_t index_;
  std::vector<In> in_;
  uint32_t ended_ = 0;
  uint32_t prefix_ = 0;  // ordered flows: the sequence number at the head of each segment
  std::string lost_;     // sources the flow went on without

 private:
  uint32_t index_of(const In& in) const { return static_cast<uint32_t>(&in - in_.data()); }
  bool sent_by(const Completion& c, fi_addr_t peer) const {
    return sent_by_peer(*ofi_->ep, c, peer);
  }

  // Tells the sources that have not ended that this target takes nothing
  // more: a ring-header word (shm), an abort message (ofi), each once. With
  // `flush`, drives the endpoint for at most kAbortFlush so that the
  // messages leave (teardown: not from inside a completion handler).
  void send_aborts(bool flush);

  void publish_credit(In& in);

  void retry_pending_credits();

  // A remote segment's transfer into `slot` of ring s completed: once every
  // segment up to the source's END has, tell the source (kEndConfirmed).
  // Counting arrivals, not positions, holds on unordered providers too.
  void note_arrival(uint32_t s, uint32_t slot);

  void send_confirmation(uint32_t s);

  void post_receive(uint32_t s, uint32_t j);

  // `slot` is where the segment lies in the ring: k % S, or on the message
  // path the buffer it landed in. While an earlier segment of the ring is
  // kept (keep_held), it waits behind it: a ring's credit counts segments
  // released in ring order.
  void release(In& in, uint32_t slot);
  void release_now(In& in, uint32_t slot);

  // Where segment `k` of ring `s` is, if it has arrived: its slot, or -1.
  int64_t locate(uint32_t s, const In& in) const;

  std::string corrupt(uint32_t s, uint64_t k, const char* problem) const;

  // next() without the Latency fast path, which it takes over before and
  // hands back after (absorb_fast, export_fast).
  Status next_slow(Deadline deadline, SegmentView* out);
  void absorb_fast();
  void export_fast();
  // Counts the segments the fast path took from ring s.
  void count_fast(uint32_t s);

  // Checks a footer and payload written by another process before anything
  // is handed to the user: a corrupt segment must never cause an overrun.
  // Sets h->records.
  Status check_segment(uint32_t s, uint64_t k, Head* h);

  void handle(const Completion& c);

  // A failed operation. Credit for a source that has already closed and
  // gone is moot: only a failure to receive data fails the flow.
  Status on_cq_error(const std::string& err, void* failed);

  auto cq_handler() {
    return [this](const Completion& c) {
      handle(c);
      return failed_ == Status::kOk;
    };
  }
  auto cq_error_handler() {
    return [this](const std::string& err, void* failed) { return on_cq_error(err, failed); };
  }

  Status drain_cq();
  Status progress();

  Status park(Deadline deadline);

  std::string lost_sources() const;

  // Nothing was ready: spin, then yield, then park (on the doorbell futex, or
  // on the completion queue when ofi rings exist), until a segment arrives,
  // every source ended, the deadline passes or a source is lost.
  Status wait(Deadline deadline, SegmentView* out);

  // A source that is gone and has nothing more published can never end its
  // ring: report it (after scan() drained everything it did publish), unless
  // the kind goes on without it.
  Status check_sources();
  // Fails the flow for good naming source `s`, lost before it closed: `why`.
  Status fail_lost_source(uint32_t s, const std::string& why);

  std::string describe_wait(const char* what) const;

  layout::Doorbell* bell_;
  uint32_t credit_batch_ = 1;
  int held_ = -1;
  uint32_t held_slot_ = 0;
  // Segments kept past the next() that handed them out (Target::keep), and
  // those released behind them, per ring in ring order; `done` once
  // released. Empty until keep_held() is first called.
  struct Kept {
    uint32_t slot = 0;
    uint64_t id = 0;
    bool done = false;
  };
  std::vector<std::deque<Kept>> kept_;
  uint64_t kept_ids_ = 0;
  bool has_remote_ = false;
  bool has_local_ = false;
  bool armed_ = false;         // a Worker set bell_->waiting
  bool end_given_up_ = false;  // give_up_end(): send_aborts(true) does not wait
  bool aborts_sent_ = false;   // send_aborts() ran: the shm rings' words are written
  // ofi only.
  std::vector<uint8_t> arrived_;    // RMA: [source * S + slot] a segment landed there
  std::vector<int32_t> buffer_of_;  // messages: [source * S + k % S] the buffer segment k landed in
  std::vector<Op> recv_ops_;        // messages: [source * S + buffer]
  std::vector<Op> credit_ops_;      // [source]: the credit transfer in flight
  std::vector<uint8_t> credit_pending_;
  std::vector<Op> abort_ops_;  // [source]: the posted abort receive; [num_sources]: our abort sends
  std::vector<uint32_t>
      source_aborted_;                 // [source]: its abort word (layout::abort_word), 0 if none
  std::vector<uint8_t> abort_posted_;  // [source]: our abort message to it was posted
  std::vector<Op> confirm_ops_;        // [source]: the END confirmation sent to it
  std::vector<uint8_t> confirm_pending_;  // [source]: that confirmation awaits a retry
  Deadline next_liveness_{};
  CompletionReader cq_;
  std::unique_ptr<OfiRing> wire_;  // how segments and credit cross the endpoint
  bool by_message_ = false;        // wire_->by_message(), read on every scan
  std::vector<FastIn> fast_in_;    // TargetCore::fast_, when the fast path is on
  // Declared last, so destroyed first (retire() closes it even earlier):
  // closing the endpoint may still touch the contexts (recv_ops_,
  // credit_ops_) of operations in flight.
  std::unique_ptr<OfiTarget> ofi_;
};

// Shuffle flows and unordered replicate flows: segments are handed out in
// turn across the rings, starting after the last one served (fairness). A
// lost source fails the target: what it would have sent is missing.
class UnorderedTarget final : public FlowTarget {
 public:
  UnorderedTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
                  std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi);
  ~UnorderedTarget() override;

 private:
  Status scan(SegmentView* out) override;
  Status end_of_flow() override { return Status::kEndOfFlow; }
  bool go_on_without(uint32_t, std::string_view) override { return false; }
  Status check_stalled() override { return Status::kTimeout; }
};

// Ordered replicate flows: every target hands segments out in the order of
// the sequence numbers their sources took from the flow's sequencer, and
// reports a number that never arrives as a gap. A lost source does not fail
// the target: what it published is delivered, what it numbered and never
// published becomes gaps.
class OrderedTarget final : public FlowTarget {
 public:
  // REQUIRES: `sequencer` is set.
  OrderedTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
                std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi,
                std::unique_ptr<Sequencer> sequencer);
  ~OrderedTarget() override;

  uint64_t gap() const override { return gap_; }

 private:
  // Hands out the segment carrying sequence number `expected_`, wherever it
  // is. Every ring's head is its lowest number (a source takes numbers in
  // increasing order), so only heads are looked at. Segments without
  // records and ones that come after their number was declared a gap are
  // released on the way.
  Status scan(SegmentView* out) override;

  // If every source closed, each number taken was delivered (a source
  // publishes what it numbers before it closes). If one was lost, numbers
  // taken but never delivered are gaps, and then the flow ends incomplete.
  Status end_of_flow() override;

  // A lost or aborted source: the flow goes on without it.
  bool go_on_without(uint32_t s, std::string_view why) override;

  // Every ring may have ended once lost sources were counted out: then the
  // end of the flow. Otherwise whether `expected_` is a gap (check_gap).
  Status check_stalled() override;

  // When nothing is deliverable: if sequence number `expected_` is known
  // to have been taken and has not arrived for the gap timeout, it is
  // reported as a gap and skipped. Known: a ring holds a later number (its
  // source took it after ours was taken), or a source was lost and the
  // sequencer says the number was taken. (A number that is merely the
  // latest taken, by a source that is slow but alive, is never a gap: that
  // source will publish it.) A number that was known taken when the stall
  // on an earlier gap began has been missing as long, through a stall in
  // which nothing held its source back (no ring held anything deliverable),
  // so it is reported at once after that gap: a dead source's whole run of
  // numbers costs one gap timeout, not one per number. And once a source
  // is lost, a number below the head of every ring still open is reported
  // at once: a source's numbers only grow along its ring, so no open source
  // holds it, and the lost one will never send it (its segments refused
  // after the fence, say), however the live sources' numbers interleave.
  // (That last case, and the same for a source that skipped this target,
  // is known_gap(), which scan() reports itself.)
  Status check_gap();

  // After a scan that delivered nothing: `expected_` is a gap known at
  // once (every open ring's head is past it, and a source was lost or the
  // flow skips full targets).
  bool known_gap() const;

  // `known_lost`: reported because every open source is past the number.
  Status report_gap(bool known_lost = false);

  std::chrono::milliseconds gap_timeout_;
  // The flow's sources may skip this target while its ring is full
  // (skip_full_targets_after): a number below every open ring's head, or
  // past the end, is then a gap even with no source lost.
  const bool skipped_when_full_;
  std::unique_ptr<Sequencer> sequencer_;
  uint64_t expected_ = 0;  // the next sequence number to hand out
  uint64_t gap_ = 0;       // the last one reported missing
  uint64_t late_ = 0;      // segments dropped because they came after their gap
  // The lowest later number the last scan saw a ring holding (kNoneAhead:
  // none).
  static constexpr uint64_t kNoneAhead = UINT64_MAX;
  uint64_t ahead_of_ = kNoneAhead;
  uint32_t rings_ahead_ = 0;  // rings whose head the last scan saw past expected_
  bool peek_taken_ = false;
  uint64_t peek_count_ = 0;               // what the last peek said was taken
  Deadline gap_since_ = Deadline::max();  // when the stall on expected_ began
  uint64_t stall_known_ = 0;              // every number below was known taken by gap_since_
  Deadline next_peek_{};
};

}  // namespace sluice::detail
