// FlowTarget, ofi rings: segment arrivals (RMA completions or posted
// receives), credit sent back by RMA write or message, END confirmations
// and abort messages, and parking on the completion queue.
#include <rdma/fi_errno.h>

#include "common/log.h"
#include "flow/flow_target.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {

using layout::Footer;
using layout::RingView;

void FlowTarget::send_aborts(bool flush) {
  const auto n = static_cast<uint32_t>(in_.size());
  const uint32_t cause = abort_cause(ctx_);
  const bool ofi = ofi_ != nullptr;  // then sized before anything can fail
  for (uint32_t s = 0; s < n; ++s) {
    In& in = in_[s];
    if (in.ended) continue;
    if (!in.remote) {
      if (!aborts_sent_) shm_ring::abort_target(in.ring, cause);
      continue;
    }
    if (!ofi || abort_posted_[s] || source_aborted_[s] || in.confirmed) continue;
    abort_posted_[s] = post_abort_message(*ofi_->ep, ofi_->control, n, ofi_->control_mr.desc,
                                          index_, cause, in.peer, &abort_ops_[n]);
  }
  aborts_sent_ = true;
  if (flush && ofi && !end_given_up_)
    flush_abort_messages(&abort_ops_[n], [this] { return drain_cq(); });
}

Status FlowTarget::fail_for_good(std::string message, uint32_t rank) {
  FailureState::fail_for_good(std::move(message), rank);
  send_aborts(false);
  return failed_;
}

void FlowTarget::retry_pending_credits() {
  for (uint32_t s = 0; s < in_.size(); ++s) {
    if (credit_pending_[s] && !credit_ops_[s].busy) {
      credit_pending_[s] = 0;
      publish_credit(in_[s]);
    }
    if (confirm_pending_[s]) send_confirmation(s);
  }
}

// A remote segment's transfer into `slot` of ring s completed: once every
// segment up to the source's END has, tell the source (kEndConfirmed).
// Counting arrivals, not positions, holds on unordered providers too.
void FlowTarget::note_arrival(uint32_t s, uint32_t slot) {
  In& in = in_[s];
  const Footer* f = in.ring.footer(slot);
  ++in.arrived;
  // A failed target confirms nothing (send_confirmation): it sent its
  // sources an abort, and a confirmation matched before it would tell a
  // source that all was delivered.
  if (failed_ != Status::kOk) return;
  if (f->flags & layout::kEnd) in.end_seq = f->seq.load(std::memory_order_relaxed);
  if (!in.confirmed && in.end_seq != 0 && in.arrived >= in.end_seq) {
    in.confirmed = true;  // from here on, no credit goes to this source
    send_confirmation(s);
  }
}

// The check after the transfer completed, before anything marks it: if
// the rank is not fenced now, the segment landed before this process saw
// the view without it (PeerTable::set fences a dead incarnation before it
// publishes the view's epoch), and the drain of a lost source delivers only
// those.
bool FlowTarget::refuse_fenced(uint32_t s) {
  if (ctx_->liveness == nullptr) return false;
  const uint32_t rank = ctx_->spec.sources()[s].rank;
  if (!ctx_->liveness->fenced(rank)) return false;
  if (in_[s].refused++ == 0) {
    log::warn(ctx_->endpoint_name(false, index_), ": refused what ", ctx_->peer_name(true, s),
              " on rank ", rank, host_of(ctx_, rank),
              " sent after the job declared its rank lost (fenced: ", in_[s].arrived,
              " of its segments arrived before)");
  }
  return true;
}

void FlowTarget::send_confirmation(uint32_t s) {
  if (failed_ != Status::kOk) return;  // as in note_arrival
  const auto n = static_cast<uint32_t>(in_.size());
  Op& op = confirm_ops_[s];
  op = Op{{}, OpKind::kConfirmSend, s, 0, 1, false};
  ofi_->control[n + 1] = kEndConfirmed | index_;
  const ssize_t rc = ofi_->ep->tsend(&ofi_->control[n + 1], sizeof(uint64_t), ofi_->control_mr.desc,
                                     in_[s].peer, kTagAbort | index_, &op.ctx);
  confirm_pending_[s] = rc == -FI_EAGAIN;
  op.busy = rc == 0;
  if (rc != 0 && rc != -FI_EAGAIN) {
    // The source then waits out its linger and leaves its endpoint open.
    log::debug(ctx_->endpoint_name(false, index_), ": cannot confirm the END of ",
               ctx_->peer_name(true, s), ": ", ofi::lib::strerror(static_cast<int>(-rc)));
  }
}

void FlowTarget::post_receive(uint32_t s, uint32_t j) {
  Op& op = recv_ops_[s * ctx_->ring_segments + j];
  op = Op{{}, OpKind::kSegmentRecv, s, j, true};
  const RingView& ring = in_[s].ring;
  ssize_t rc;
  while ((rc = wire_->post_segment_receive(ring.payload(j), ring.segment_stride,
                                           ofi_->ring_mrs[s].desc, s, &op.ctx)) == -FI_EAGAIN) {
    if (progress() != Status::kOk) return;
  }
  if (rc != 0) {
    fail_for_good(ctx_->endpoint_name(false, index_) +
                  ": cannot post a receive: " + ofi::lib::strerror(static_cast<int>(-rc)));
  }
}

void FlowTarget::handle(const Completion& c) {
  const fi_cq_data_entry& e = c.entry;
  const uint32_t S = ctx_->ring_segments;
  if (e.flags & FI_REMOTE_CQ_DATA) {
    // A source wrote a segment into our ring (RMA path). The data comes
    // from a peer: check it before using it as an index. (Who wrote is not
    // checked: tcp;ofi_rxm 1.17 names fi_addr 0 as the writer of every
    // remote write. The write could only land in segments registered for
    // the source whose key it used, one registration per source.)
    const uint64_t s = (e.data >> 16) & 0xffff;
    const uint64_t slot = e.data & 0xffff;
    const uint64_t count = ((e.data >> 32) & 0xffff) + 1;
    if (ofi_->ep->needs_data_receives()) ofi_->ep->repost_data_receive();
    if (s >= in_.size() || !in_[s].remote || slot + count > S || (e.data >> 48) != 0) {
      fail_for_good(ctx_->endpoint_name(false, index_) + ": a peer wrote with completion data " +
                    std::to_string(e.data) + ", which names no segments of this target");
      return;
    }
    if (refuse_fenced(static_cast<uint32_t>(s))) return;
    for (uint64_t j = 0; j < count; ++j) {
      arrived_[s * S + slot + j] = 1;
      note_arrival(static_cast<uint32_t>(s), static_cast<uint32_t>(slot + j));
    }
    return;
  }
  if (e.op_context == nullptr || ofi_->ep->is_data_receive(e.op_context)) return;
  Op* op = static_cast<Op*>(e.op_context);
  if ((op->kind == OpKind::kSegmentRecv || op->kind == OpKind::kAbortRecv) &&
      !sent_by(c, in_[op->ring].peer)) {
    // Name the impostor where it is one of this flow's sources (a buggy
    // peer), so that lost_peer() points at it rather than at its victim.
    std::string who = "an endpoint other than " + ctx_->peer_name(true, op->ring);
    uint32_t rank = kNoRank;
    for (uint32_t s = 0; s < in_.size(); ++s) {
      if (s != op->ring && in_[s].remote && c.from == in_[s].peer) {
        who = ctx_->peer_name(true, s);
        rank = ctx_->spec.sources()[s].rank;
      }
    }
    fail_for_good(ctx_->endpoint_name(false, index_) + ": " + who +
                      " sent a message in the name of " + ctx_->peer_name(true, op->ring),
                  rank);
    return;
  }
  switch (op->kind) {
    case OpKind::kSegmentRecv: {
      op->busy = false;
      if (refuse_fenced(op->ring)) break;  // and its slot is posted no more
      In& in = in_[op->ring];
      const uint64_t seq = in.ring.footer(op->slot)->seq.load(std::memory_order_relaxed);
      if (e.len != in.ring.segment_stride || seq <= in.k || seq > in.k + S) {
        fail_for_good(corrupt(op->ring, in.k, "a message of unexpected size or sequence number"),
                      ctx_->spec.sources()[op->ring].rank);
        return;
      }
      buffer_of_[op->ring * S + (seq - 1) % S] = static_cast<int32_t>(op->slot);
      note_arrival(op->ring, op->slot);
      break;
    }
    case OpKind::kCreditSend:
      op->busy = false;
      if (credit_pending_[op->ring]) {
        credit_pending_[op->ring] = 0;
        publish_credit(in_[op->ring]);
      }
      break;
    case OpKind::kAbortRecv:
      // A fenced process's abort names whatever it lost on its side (once
      // cut off, every rank): its own loss is the cause here.
      if (refuse_fenced(op->ring)) break;
      source_aborted_[op->ring] = abort_word_of(ofi_->control[op->ring]);
      break;
    case OpKind::kAbortSend:
      if (op->count > 0) --op->count;
      break;
    case OpKind::kConfirmSend:
      op->busy = false;
      break;
    default:
      break;
  }
}

// A failed operation. Credit for a source that has already closed and
// gone is moot: only a failure to receive data fails the flow.
Status FlowTarget::on_cq_error(const std::string& err, void* failed) {
  if (failed != nullptr && static_cast<Op*>(failed)->kind == OpKind::kCreditSend) {
    // That credit never arrived: send the count again (counts are
    // cumulative, so a resend is harmless), unless the source is done.
    Op* op = static_cast<Op*>(failed);
    op->busy = false;
    In& in = in_[op->ring];
    if (!in.ended) {
      in.published = 0;
      credit_pending_[op->ring] = 1;
    }
    return Status::kOk;
  }
  if (failed != nullptr && static_cast<Op*>(failed)->kind == OpKind::kAbortRecv) return Status::kOk;
  if (failed != nullptr && static_cast<Op*>(failed)->kind == OpKind::kConfirmSend) {
    // The source waits out its linger for it, then leaves its endpoint open.
    static_cast<Op*>(failed)->busy = false;
    return Status::kOk;
  }
  if (failed != nullptr && static_cast<Op*>(failed)->kind == OpKind::kAbortSend) {
    Op* op = static_cast<Op*>(failed);
    if (op->count > 0) --op->count;
    return Status::kOk;
  }
  const Op* op = static_cast<const Op*>(failed);
  if (op != nullptr && op->ring < in_.size()) {
    const uint32_t rank = ctx_->spec.sources()[op->ring].rank;
    std::string why = lost_reason(ctx_, rank);
    return fail_for_good(ctx_->endpoint_name(false, index_) + ": lost " +
                             ctx_->peer_name(true, op->ring) + " on rank " + std::to_string(rank) +
                             host_of(ctx_, rank) + ": " + err +
                             (why.empty() ? "" : " (" + why + ")"),
                         rank);
  }
  uint32_t rank = kNoRank;
  for (uint32_t s = 0; s < in_.size() && rank == kNoRank; ++s) {
    if (in_[s].remote && !in_[s].ended &&
        !lost_reason(ctx_, ctx_->spec.sources()[s].rank).empty()) {
      rank = ctx_->spec.sources()[s].rank;
    }
  }
  return fail_for_good(ctx_->endpoint_name(false, index_) + ": " + err + lost_sources(), rank);
}

Status FlowTarget::progress() {
  if (Status s = drain_cq(); s != Status::kOk) return s;
  retry_pending_credits();
  return failed_;
}

Status FlowTarget::park(Deadline deadline) {
  counters::Park parked(stats_);
  const auto slice = has_local_ ? kMixedParkSlice : kParkSlice;
  if (Status s = cq_.wait(*ofi_->ep, until_ms(deadline, slice), cq_handler(), cq_error_handler());
      s != Status::kOk) {
    return s;
  }
  return failed_;
}

std::string FlowTarget::lost_sources() const {
  std::string out;
  for (uint32_t s = 0; s < in_.size(); ++s) {
    if (!in_[s].remote || in_[s].ended) continue;
    std::string why = lost_reason(ctx_, ctx_->spec.sources()[s].rank);
    if (!why.empty() && out.find(why) == std::string::npos) out += "; " + why;
  }
  return out;
}

Status FlowTarget::drain_cq() { return cq_.drain(*ofi_->ep, cq_handler(), cq_error_handler()); }

void FlowTarget::wait_alone(std::chrono::milliseconds timeout) {
  if (has_remote_) (void)cq_.wait(*ofi_->ep, timeout, cq_handler(), cq_error_handler());
}

}  // namespace sluice::detail
