// FlowSource, what every kind of source shares: construction, the end of
// its life, publishing a segment, claiming one (waiting for credit), abort,
// and a lost target. The kinds: flow_source_shuffle.cc and
// flow_source_replicate.cc; the ofi side: flow_source_ofi.cc.
#include "flow/flow_source.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "common/check.h"
#include "common/futex.h"
#include "common/log.h"
#include "common/test_hooks.h"

namespace sluice::detail {

FlowSource::FlowSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings,
                       std::unique_ptr<OfiSource> ofi)
    : ctx_(ctx),
      index_(index),
      rings_(std::move(rings)),
      out_(rings_.size()),
      lane_of_(rings_.size()),
      lane_store_(rings_.size()),
      ofi_(std::move(ofi)) {
  const FlowSpec& spec = ctx->spec;
  SLUICE_CHECK(rings_.size() == spec.targets().size());
  lanes_ = lane_store_.data();
  out_rings_ = out_.data();
  num_targets_ = static_cast<uint32_t>(rings_.size());
  prefix_ = spec.segment_prefix_bytes();
  stats_ = counters::acquire(counters::Role::kSource, spec.name(), spec.sources()[index_].rank,
                             spec.sources()[index_].slot, num_targets_, spec.record_size(),
                             ctx->ring_segments);
  for (uint32_t t = 0; t < num_targets_; ++t) {
    counters::set_peer(stats_, t, spec.targets()[t].rank, spec.targets()[t].slot);
  }
  for (uint32_t t = 0; t < num_targets_; ++t) lane_of_[t] = t;
  test_eagain_every_ = test_hooks::ofi_eagain_every();
  wire_index_ = index_;
  if (const uint64_t forged = test_hooks::ofi_impersonate(ctx->spec.sources()[index_].rank);
      forged != 0) {
    wire_index_ = static_cast<uint32_t>(forged - 1);
  }
  route_ = spec.route();
  key_offset_ = spec.key_offset();
  key_size_ = spec.key_size();
  route_fn_ = spec.route_fn();
  latency_ = spec.optimize() == Optimize::kLatency;
  const uint32_t S = ctx->ring_segments;
  for (size_t t = 0; t < rings_.size(); ++t) out_[t].limit = S;
  // One record per segment until a segment is published through
  // mark_published: the Latency fast path publishes one-record segments
  // without it.
  seg_records_.assign(rings_.size() * S, 1);
  delivered_.assign(rings_.size(), Delivered{});
  drivable_ = ofi_ != nullptr;
  if (ofi_ != nullptr) {
    cq_.enable_reordering(ofi_->ep->test_unordered());
    wire_ = make_ofi_ring(*ofi_->ep);
    coalesce_ = wire_->max_segments_per_send(rings_[0].ring.segment_stride, S);
    post_batch_ = coalesce_;
    ops_ = std::vector<Op>(rings_.size() * S);
    credit_ops_ = std::vector<Op>(rings_.size());
    abort_ops_ = std::vector<Op>(rings_.size() + 1);
    credit_seen_.assign(rings_.size(), 0);
    // Sized before any receive is posted: posting drives progress when the
    // provider's queue is full, and a completion handled then writes them.
    target_aborted_.assign(rings_.size(), 0);
    end_confirmed_.assign(rings_.size(), 0);
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (!rings_[t].remote) continue;
      for (uint32_t j = 0; j < S; ++j)
        ops_[t * S + j] = Op{{}, OpKind::kSegmentSend, t, j, 1, false};
      credit_ops_[t] = Op{{}, OpKind::kCreditRecv, t, 0, 1, false};
      ofi_->credits[t] = 0;
      if (wire_->by_message()) post_credit_receive(t);
      abort_ops_[t] = Op{{}, OpKind::kAbortRecv, t, 0, 1, false};
      post_control_receive(*ofi_->ep, ofi_->control, ofi_->control_mr.desc, t, &abort_ops_[t]);
    }
  }
}

FlowSource::~FlowSource() { counters::release(stats_); }

uint64_t FlowSource::delivered(uint32_t t) {
  if (t >= out_.size()) return 0;
  // What the target's consumer count says now (shm: its ring; ofi: the
  // credit last heard, which the source's own calls and its Worker keep
  // reading), not only what the last claim needed to know.
  Out& o = out_[t];
  const uint64_t consumed = rings_[t].remote ? credit_seen_[t] : shm_ring::consumed(rings_[t].ring);
  o.limit = std::max(o.limit, consumed + ctx_->ring_segments);
  count_delivered(t);
  return delivered_[t].records;
}

void FlowSource::retire() {
  if (ofi_ != nullptr && closed_ && failed_ == Status::kOk) {
    // After a successful close() the last transfers and the targets'
    // confirmations of the END are awaited by whoever destroyed the source
    // in time: its Worker drives it until they are in, and a source
    // destroyed before parks on the Cluster's Linger (release_source),
    // which destroys it once they are, or at its deadline. Not waited for
    // here: destructors never block. What is still missing now is given up
    // on: transfers still in flight leave the endpoint open rather than be
    // torn down under.
    (void)progress();
    if (failed_ == Status::kOk && (transfers_busy() || !all_confirmed())) {
      log::warn(ctx_->endpoint_name(true, index_),
                ": destroyed before its last transfers were confirmed by every target; gave up "
                "on them (call Cluster::leave() before the Cluster ends, or close_and_wait())");
      ofi_->ep->abandon();
    } else if (failed_ != Status::kOk) {
      log::warn(ctx_->endpoint_name(true, index_),
                ": the last transfers after close() failed: ", error_);
      ofi_->ep->abandon();
    }
    if (const uint64_t ms = test_hooks::ofi_close_delay_ms(); ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  } else {
    // Failed or never closed: nothing left is worth delivering. Tell the
    // targets at once (otherwise an ofi target learns it only when this
    // rank exits), then leave the endpoint open: transfers may be in
    // flight, and a target that gave up already no longer drives its
    // endpoint.
    if (!closed_ && !aborted_) signal_abort();
    if (ofi_ != nullptr) ofi_->ep->abandon();
  }
  // Let go of the endpoint now, before the kind's members (a replicate
  // flow's sequencer, whose handle may wait up to 200 ms to say goodbye to
  // its owner): the flow's connections end first.
  ofi_.reset();
}

// Tells every target that this source ends without END: a ring-header
// word (shm), an abort message (ofi).
void FlowSource::signal_abort() {
  if (ofi_ != nullptr) send_aborts();
  for (auto& r : rings_) {
    if (r.remote) continue;
    shm_ring::abort_source(r.ring, r.bell, abort_cause(ctx_));
  }
}

Status FlowSource::refuse(size_t bytes) {
  if (failed_ != Status::kOk) return failed_;
  if (closed_)
    return fail(Status::kClosed, ctx_->endpoint_name(true, index_) + ": push after close()");
  const FlowSpec& spec = ctx_->spec;
  // A byte record's own size where the push said it (record_bytes_, the
  // slow path), else at least what its framed size shows.
  const bool known = spec.record_size() != 0 || record_stride(record_bytes_) == bytes;
  const size_t own = spec.record_size() != 0 ? bytes : record_bytes_;
  return fail(
      Status::kInvalid,
      ctx_->endpoint_name(true, index_) + ": a record of " +
          (known ? std::to_string(own) + " bytes"
                 : "more than " + std::to_string(bytes - kRecordHeaderBytes - 8) + " bytes") +
          " exceeds the largest this flow takes, " + std::to_string(spec.max_record_bytes()) +
          " bytes (segment_bytes " + std::to_string(spec.effective_segment_bytes()) +
          "); raise segment_bytes");
}

Status FlowSource::fail_for_good(std::string message, uint32_t rank) {
  const Status s = FailureState::fail_for_good(std::move(message), rank);
  fast_open_ = false;
  for (Lane& l : lane_store_) l = Lane{};
  return s;
}

void FlowSource::abort() {
  if (closed_ || aborted_) return;
  aborted_ = true;
  fast_open_ = false;
  counters::set_state(stats_, counters::State::kAborted);
  signal_abort();
  // Every later push goes to reserve(), which reports kClosed.
  for (uint32_t t = 0; t < num_targets_; ++t) lanes_[lane_of_[t]] = Lane{};
  failed_ = Status::kClosed;
  error_ = ctx_->endpoint_name(true, index_) + ": aborted";
}

bool FlowSource::lingers() const {
  return ofi_ != nullptr && closed_ && failed_ == Status::kOk && !aborted_ &&
         (transfers_busy() || !all_confirmed());
}

Status FlowSource::wait_delivered(Deadline deadline) {
  test_hooks::note_blocking_wait("a source waiting for its last transfers");
  if (!closed_)
    return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": wait before close()");
  if (ofi_ == nullptr) return failed_;
  if (failed_ != Status::kOk) return failed_;
  if (Status s = drain(deadline); s != Status::kOk) return s;
  return await_confirmations(deadline);
}

Status FlowSource::fail_invalid(const char* what) {
  return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": " + what);
}

// A Worker parks on the ring it last found without credit (shm: its
// credit futex) and on this endpoint's completion queue (ofi).
bool FlowSource::arm(WaitSet& set) {
  if (failed_ != Status::kOk) return false;
  if (ofi_ != nullptr) set.add_ofi(this, ofi_->ep.get());
  if (skip_wake_ != kForever) set.wake_at(skip_wake_);
  const uint32_t t = wait_target_;
  if (t >= num_targets_ || rings_[t].remote || !live(t)) return true;
  auto* hdr = rings_[t].ring.header;
  hdr->source_waiting.store(1, std::memory_order_relaxed);
  armed_ = t;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t seen = hdr->credit_seq.load(std::memory_order_relaxed);
  if (has_credit(t)) return false;
  set.add_word(&hdr->credit_seq, seen);
  return true;
}

void FlowSource::wake_target(uint32_t t) { shm_ring::wake(&rings_[t].bell->seq); }

void FlowSource::disarm() {
  if (armed_ == kNotArmed) return;
  rings_[armed_].ring.header->source_waiting.store(0, std::memory_order_relaxed);
  armed_ = kNotArmed;
}

void FlowSource::wait_alone(std::chrono::milliseconds timeout) {
  if (ofi_ != nullptr) (void)park(kForever, timeout);
}

Status FlowSource::finish_close(Deadline deadline) {
  // close() waits only briefly for the transfers to complete: completing
  // them may need the peer to drive its own endpoint, and the peer's thread
  // may be closing a source towards us at this very moment. The brief wait
  // drives this endpoint, so that every byte is handed to the provider
  // before the caller turns to other work; the source lingers for the
  // completions when it is destroyed.
  if (ofi_ != nullptr && !test_hooks::ofi_close_no_flush()) {
    const Deadline brief = std::min(deadline, Clock::now() + kCloseFlush);
    if (Status s = drain(brief); s != Status::kOk && s != Status::kTimeout) return s;
  }
  closed_ = true;
  fast_open_ = false;
  counters::set_state(stats_, counters::State::kEnded);
  return Status::kOk;
}

// Why target t can no longer be delivered to (its rank is lost, or the
// target was destroyed before this source's END), or empty.
std::string FlowSource::target_lost(uint32_t t) const {
  if (target_aborted(t)) return target_destroyed_reason(t);
  return lost_reason(ctx_, ctx_->spec.targets()[t].rank);
}

// A target is mostly destroyed early because it failed (a Worker drops a
// failed input), and mostly because a rank of the flow was lost: name that
// rank, as the target's process knew it when it aborted (its abort word),
// else the first lost one this process knows of, so that every end of the
// flow reports the same cause.
std::string FlowSource::target_destroyed_reason(uint32_t t) const {
  std::string why = "it failed or was destroyed before the end of the flow";
  if (const uint32_t cause = layout::abort_cause(target_aborted(t)); cause != layout::kNoCause) {
    why.append(" (its rank had lost rank ").append(std::to_string(cause)).append(" of the flow");
    if (std::string lost = lost_reason(ctx_, cause); !lost.empty()) why.append(": ").append(lost);
    return why.append(")");
  }
  for (const auto* side : {&ctx_->spec.sources(), &ctx_->spec.targets()}) {
    for (const Endpoint& e : *side) {
      if (std::string lost = lost_reason(ctx_, e.rank); !lost.empty()) {
        why.append(" (rank ")
            .append(std::to_string(e.rank))
            .append(" of the flow is lost: ")
            .append(lost)
            .append(")");
        return why;
      }
    }
  }
  return why;
}

uint32_t FlowSource::target_aborted(uint32_t t) const {
  if (rings_[t].remote) return target_aborted_.empty() ? 0 : target_aborted_[t];
  return shm_ring::target_aborted(rings_[t].ring);
}

// Target t is gone for `why`. A shuffle source fails for good (records
// routed to it cannot be delivered); a replicate source drops it and goes
// on for the others (acquire_live and the callers of drop_if_lost).
Status FlowSource::lost_target(uint32_t t, const std::string& why) {
  if (drop_if_lost(t, false)) return failed_;
  std::string text = ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                     ctx_->peer_name(false, t) + host_of(ctx_, ctx_->spec.targets()[t].rank) +
                     ": " + why;
  // A target that aborted after its rank lost another: that one is the peer lost.
  const uint32_t cause = layout::abort_cause(target_aborted(t));
  if (cause != layout::kNoCause && ctx_->liveness != nullptr) ctx_->liveness->hear_lost(cause);
  return fail_for_good(std::move(text),
                       cause != layout::kNoCause ? cause : ctx_->spec.targets()[t].rank);
}

Status FlowSource::wait_for_credit(uint32_t t, Deadline deadline) {
  const bool remote = rings_[t].remote;
  auto* hdr = rings_[t].ring.header;
  const uint32_t target_rank = ctx_->spec.targets()[t].rank;
  // Counted on the way out, however the wait ends; meanwhile the counters
  // say which target this source waits for, and since when.
  mark_waiting(t);
  struct Timed {
    FlowSource* source;
    counters::Slot* stats;
    Clock::time_point start = Clock::now();
    ~Timed() {
      source->clear_waiting();
      counters::add(stats->credit_waits, 1);
      counters::add(
          stats->credit_wait_ns,
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()));
    }
  } timed{this, stats_};
  for (uint32_t i = 0;; ++i) {
    // While spinning, an ofi ring reads its completion queue every
    // kSpinProgressEvery rounds only, as targets do: on tcp each read is a
    // system call of the provider's progress even when the queue is empty.
    const bool drive = !remote || i % kSpinProgressEvery == 0 || i >= ctx_->spin_iterations;
    if (has_credit(t, drive)) return Status::kOk;
    if (failed_ != Status::kOk) return failed_;
    // Liveness before the deadline: a caller polling with a past deadline
    // (close(Clock::now()) in a loop) must see a lost target too.
    const bool past = deadline != kForever && Clock::now() >= deadline;
    if (past || i >= ctx_->spin_iterations + kYieldRounds) {
      if (std::string why = target_lost(t); !why.empty()) return lost_target(t, why);
    }
    if (past) {
      return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) +
                                        ": deadline passed waiting for credit from " +
                                        ctx_->peer_name(false, t) + host_of(ctx_, target_rank) +
                                        " (its ring is full: the target is not consuming)");
    }
    if (i < ctx_->spin_iterations) {
      cpu_relax();
      continue;
    }
    if (i < ctx_->spin_iterations + kYieldRounds) {
      sched_yield();
      continue;
    }
    if (remote) {
      if (Status s = park(deadline); s != Status::kOk) return s;
      continue;
    }
    counters::Park parked(stats_);
    shm_ring::park(&hdr->source_waiting, &hdr->credit_seq, until(deadline),
                   [&] { return has_credit(t); });
  }
}

}  // namespace sluice::detail
