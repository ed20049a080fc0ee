// FlowSource, ofi rings (every kind): hands published segments to the
// provider (RMA writes, coalescing consecutive full segments, or one message
// each), handles credit, abort and END-confirmation completions, and drains
// the endpoint at close and destruction.
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>

#include "common/log.h"
#include "flow/flow_source.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {

// Segments published because they are full (from reserve) wait for a
// few more to go in one write; flush() posts what waits, and END and
// Latency-mode segments go at once.
Status FlowSource::post_if_due(uint32_t t, uint32_t flags, Deadline deadline, bool try_only) {
  Out& o = out_[t];
  const uint32_t S = ctx_->ring_segments;
  if (latency_ || (flags & layout::kEnd) || o.k - o.posted >= post_batch_ || o.k % S == 0) {
    return post_pending(t, deadline, try_only);
  }
  return Status::kOk;
}

// Hands the published, unsent segments of target t to the provider: one
// RMA write per run of consecutive slots (one message each on the message
// path). On kWouldBlock / kTimeout nothing is lost: they are retried by
// the next reserve, flush or close.
Status FlowSource::post_pending(uint32_t t, Deadline deadline, bool try_only) {
  Out& o = out_[t];
  const uint32_t S = ctx_->ring_segments;
  if (numbers_on_post_ && o.posted < o.k) {
    // An ordered flow's run gets its sequence numbers now; once taken they
    // must reach every target even from try_push and past the deadline: a
    // number left unsent while this source idles would be declared a gap.
    if (Status s = number_pending(); s != Status::kOk) return s;
    deadline = kForever;
    try_only = false;
  }
  while (o.posted < o.k) {
    const auto slot = static_cast<uint32_t>(o.posted % S);
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>({o.k - o.posted, S - slot, coalesce_}));
    if (Status s = post_range(t, o.posted, slot, count, deadline, try_only); s != Status::kOk)
      return s;
    o.posted += count;
  }
  // Drives the transfer on providers with manual progress.
  return progress();
}

Status FlowSource::post_all_pending(Deadline deadline) {
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (rings_[t].remote && live(t) && out_[t].posted < out_[t].k) {
      if (Status s = post_pending(t, deadline, false); s != Status::kOk) return s;
    }
  }
  return Status::kOk;
}

Status FlowSource::post_range(uint32_t t, uint64_t k, uint32_t slot, uint32_t count,
                              Deadline deadline, bool try_only) {
  const OutRingRef& r = rings_[t];
  const uint32_t S = ctx_->ring_segments;
  Op& op = ops_[t * S + slot];
  auto set_busy = [&](bool busy) {
    for (uint32_t j = 0; j < count; ++j) ops_[t * S + slot + j].busy = busy;
  };
  op.count = count;
  set_busy(true);
  for (uint32_t i = 0;; ++i) {
    // (Test hook: the provider refuses the n-th post, as a full queue
    // would; n = 1 refuses every post, a queue that stays full.)
    const ssize_t rc = test_eagain_every_ != 0 && ++test_posts_ % test_eagain_every_ == 0
                           ? -FI_EAGAIN
                           : wire_->send_segments(
                                 r.ring.payload(k), count, ofi_->staging_mr.desc,
                                 RemoteRing{r.peer, r.ring_addr, r.ring_key, r.ring.segment_stride},
                                 wire_index_, slot, &op.ctx);
    if (rc == 0) return Status::kOk;
    if (rc != -FI_EAGAIN) {
      set_busy(false);
      if (drop_if_lost(t, true)) return failed_;
      return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot send a segment to " +
                               ctx_->peer_name(false, t) + ": " +
                               ofi::lib::strerror(static_cast<int>(-rc)) +
                               lost_suffix(ctx_->spec.targets()[t].rank),
                           ctx_->spec.targets()[t].rank);
    }
    // The provider's queue is full: completing earlier operations frees it.
    if (Status s = progress(); s != Status::kOk) {
      set_busy(false);
      return s;
    }
    // A full queue is back-pressure like a full ring: try_push must not
    // wait on it (its caller may be the one who has to drain the peer).
    if (try_only) {
      set_busy(false);
      if (std::string why = target_lost(t); !why.empty()) return lost_target(t, why);
      return Status::kWouldBlock;
    }
    // Liveness before the deadline: a caller that polls with a past
    // deadline (a Worker's flush) must see a lost target too, whose queue
    // may stay full for ever.
    if (std::string why = target_lost(t); !why.empty()) {
      set_busy(false);
      return lost_target(t, why);
    }
    if (Clock::now() >= deadline) {
      set_busy(false);
      return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) + ": deadline passed while " +
                                        ctx_->peer_name(false, t) +
                                        "'s provider queue stayed full");
    }
    // Spin, then yield, then sleep on the completion queue in short slices:
    // a queue that stays full must not cost a CPU.
    if (i < ctx_->spin_iterations) {
      cpu_relax();
    } else if (i < ctx_->spin_iterations + kYieldRounds) {
      sched_yield();
    } else if (Status s = park(deadline, kQueueParkSlice); s != Status::kOk) {
      set_busy(false);
      return s;
    }
  }
}

void FlowSource::forget_transfers(uint32_t t) {
  if (ofi_ == nullptr) return;
  for (uint32_t j = 0; j < ctx_->ring_segments && rings_[t].remote; ++j)
    ops_[t * ctx_->ring_segments + j].busy = false;
}

void FlowSource::send_aborts() {
  const uint32_t n = num_targets_;
  for (uint32_t t = 0; t < n; ++t) {
    if (!rings_[t].remote || !live(t) || target_aborted_[t]) continue;
    (void)post_abort_message(*ofi_->ep, ofi_->control, n, ofi_->control_mr.desc, index_,
                             abort_cause(ctx_), rings_[t].peer, &abort_ops_[n]);
  }
  if (!end_given_up_) flush_abort_messages(&abort_ops_[n], [this] { return progress(); });
}

void FlowSource::post_credit_receive(uint32_t t) {
  Op& op = credit_ops_[t];
  op.busy = true;
  ssize_t rc;
  while ((rc = wire_->post_credit_receive(&ofi_->credits[t], ofi_->credits_mr.desc, t, &op.ctx)) ==
         -FI_EAGAIN) {
    (void)progress();
  }
  if (rc != 0) {
    fail_for_good(ctx_->endpoint_name(true, index_) +
                  ": cannot post a credit receive: " + ofi::lib::strerror(static_cast<int>(-rc)));
  }
}

std::string FlowSource::lost_suffix(uint32_t rank) const {
  std::string why = lost_reason(ctx_, rank);
  return why.empty() ? std::string() : " (" + why + ")";
}

void FlowSource::handle(const Completion& c) {
  const fi_cq_data_entry& e = c.entry;
  if (e.flags & FI_REMOTE_CQ_DATA) {
    // A target wrote our credit word for it (RMA path; as for segments,
    // providers do not reliably name who wrote).
    const uint64_t t = e.data;
    if (ofi_->ep->needs_data_receives()) ofi_->ep->repost_data_receive();
    if (t < num_targets_ && rings_[t].remote) {
      credit_seen_[t] = std::max(credit_seen_[t], ofi_->credits[t]);
    }
    return;
  }
  if (e.op_context == nullptr || ofi_->ep->is_data_receive(e.op_context)) return;
  Op* op = static_cast<Op*>(e.op_context);
  if ((op->kind == OpKind::kCreditRecv || op->kind == OpKind::kAbortRecv) &&
      !sent_by(c, rings_[op->ring].peer)) {
    // Another endpoint spoke in that target's name: ignore it and listen on.
    log::warn(ctx_->endpoint_name(true, index_), ": ignored a control message for ",
              ctx_->peer_name(false, op->ring), " from another endpoint");
    if (op->kind == OpKind::kCreditRecv) post_credit_receive(op->ring);
    if (op->kind == OpKind::kAbortRecv) {
      post_control_receive(*ofi_->ep, ofi_->control, ofi_->control_mr.desc, op->ring, op);
    }
    return;
  }
  switch (op->kind) {
    case OpKind::kSegmentSend:
      for (uint32_t j = 0; j < op->count; ++j) (op + j)->busy = false;
      break;
    case OpKind::kCreditRecv:
      credit_seen_[op->ring] = std::max(credit_seen_[op->ring], ofi_->credits[op->ring]);
      post_credit_receive(op->ring);
      break;
    case OpKind::kAbortRecv:
      // The tag matched only target op->ring: the word is its index, with
      // kEndConfirmed if it confirms our END rather than aborting.
      if (ofi_->control[op->ring] & kEndConfirmed) {
        end_confirmed_[op->ring] = 1;
      } else {
        target_aborted_[op->ring] = abort_word_of(ofi_->control[op->ring]);
      }
      break;
    case OpKind::kAbortSend:
      if (op->count > 0) --op->count;
      break;
    default:
      break;
  }
}

// A failed operation. A credit receive cancelled because a finished
// target went away costs nothing; a failed segment transfer fails the flow.
Status FlowSource::on_cq_error(const std::string& err, void* failed) {
  Op* op = static_cast<Op*>(failed);
  if (op != nullptr && op->kind == OpKind::kCreditRecv && all_remote_ended()) return Status::kOk;
  // Control messages carry no records: a failed one costs nothing here
  // (the peer's liveness is checked where it matters).
  if (op != nullptr && op->kind == OpKind::kAbortRecv) return Status::kOk;
  if (op != nullptr && op->kind == OpKind::kAbortSend) {
    if (op->count > 0) --op->count;
    return Status::kOk;
  }
  if (op != nullptr && op->ring < num_targets_ && drop_if_lost(op->ring, true)) return failed_;
  if (op != nullptr && op->ring < num_targets_) {
    const uint32_t rank = ctx_->spec.targets()[op->ring].rank;
    return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                             ctx_->peer_name(false, op->ring) + " on rank " + std::to_string(rank) +
                             host_of(ctx_, rank) + ": " + err + lost_suffix(rank),
                         rank);
  }
  uint32_t rank = kNoRank;
  for (uint32_t t = 0; t < num_targets_ && rank == kNoRank; ++t) {
    if (rings_[t].remote && !lost_reason(ctx_, ctx_->spec.targets()[t].rank).empty())
      rank = ctx_->spec.targets()[t].rank;
  }
  return fail_for_good(ctx_->endpoint_name(true, index_) + ": " + err + lost_targets(), rank);
}

bool FlowSource::all_remote_ended() const {
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (rings_[t].remote && !out_[t].ended) return false;
  }
  return true;
}

std::string FlowSource::lost_targets() const {
  std::string out;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!rings_[t].remote) continue;
    std::string why = lost_reason(ctx_, ctx_->spec.targets()[t].rank);
    if (!why.empty() && out.find(why) == std::string::npos) out += "; " + why;
  }
  return out;
}

// Waits until every live remote target has confirmed that all our
// segments arrived (kEndConfirmed), the deadline passes or one is lost.
// Only then may the endpoint close: over tcp, closing while a target still
// sends credit resets the connection, and what the target had not yet
// taken from it is lost.
Status FlowSource::await_confirmations(Deadline deadline) {
  for (;;) {
    if (Status s = progress(); s != Status::kOk) return s;
    uint32_t waiting = num_targets_;  // the first target not yet heard from
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (!rings_[t].remote || !live(t) || target_aborted_[t] || end_confirmed_[t]) continue;
      if (std::string why = lost_reason(ctx_, ctx_->spec.targets()[t].rank); !why.empty()) {
        if (drop_if_lost(t, false)) continue;
        return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                                 ctx_->peer_name(false, t) + ": " + why,
                             ctx_->spec.targets()[t].rank);
      }
      waiting = t;
      break;
    }
    if (waiting == num_targets_) return Status::kOk;
    if (Clock::now() >= deadline) {
      return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) + ": " +
                                        ctx_->peer_name(false, waiting) +
                                        " has not confirmed that our last segments arrived");
    }
    if (Status s = park(deadline); s != Status::kOk) return s;
  }
}

bool FlowSource::transfers_busy() const {
  for (const Op& op : ops_) {
    if (op.busy) return true;
  }
  return false;
}

bool FlowSource::all_confirmed() const {
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (rings_[t].remote && live(t) && !target_aborted_[t] && !end_confirmed_[t]) return false;
  }
  return true;
}

bool FlowSource::drive() {
  if (ofi_ == nullptr || failed_ != Status::kOk || aborted_) return false;
  // A failure found here is kept (failed_): the next call on the source,
  // or its destructor, reports it.
  if (progress() != Status::kOk) return false;
  if (!closed_) return true;
  return transfers_busy() || !all_confirmed();
}

void FlowSource::arm_driven(WaitSet& set) {
  if (ofi_ != nullptr && failed_ == Status::kOk) set.add_ofi(this, ofi_->ep.get());
}

// Waits until every ofi transfer has completed. A transfer to a lost
// target fails it before the deadline is looked at, so that a caller that
// polls with a past deadline (a Worker's flush: Deadline::min() in a loop)
// sees the loss too: over tcp a write to a process that died may neither
// complete nor fail.
Status FlowSource::drain(Deadline deadline) {
  while (transfers_busy()) {
    if (Status s = progress(); s != Status::kOk) return s;
    if (!transfers_busy()) break;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      bool pending = false;
      for (uint32_t j = 0; j < ctx_->ring_segments && rings_[t].remote; ++j) {
        pending |= ops_[t * ctx_->ring_segments + j].busy;
      }
      if (!pending || drop_if_lost(t, false)) continue;
      if (std::string why = lost_reason(ctx_, ctx_->spec.targets()[t].rank); !why.empty()) {
        return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                                 ctx_->peer_name(false, t) + ": " + why,
                             ctx_->spec.targets()[t].rank);
      }
    }
    if (Clock::now() >= deadline) {
      return fail(Status::kTimeout,
                  ctx_->endpoint_name(true, index_) +
                      ": deadline passed before the last segments were delivered");
    }
    if (Status s = park(deadline); s != Status::kOk) return s;
  }
  return Status::kOk;
}

Status FlowSource::park(Deadline deadline, std::chrono::milliseconds slice) {
  counters::Park parked(stats_);
  return cq_.wait(*ofi_->ep, until_ms(deadline, slice), cq_handler(), cq_error_handler());
}

}  // namespace sluice::detail
