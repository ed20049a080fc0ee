// FlowTarget, what every kind of target shares: construction, the end of
// its life, next() (release the previous segment and return credit, let the
// kind scan the rings), waiting, and the liveness of the sources. The
// kinds: flow_target_unordered.cc and flow_target_ordered.cc; the ofi side:
// flow_target_ofi.cc.
#include "flow/flow_target.h"

#include <sched.h>

#include <algorithm>
#include <random>

#include "common/check.h"
#include "common/futex.h"
#include "common/log.h"
#include "observe/counters_report.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {

using layout::Footer;

FlowTarget::FlowTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
                       std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi)
    : ctx_(ctx),
      index_(index),
      in_(rings.size()),
      prefix_(ctx->spec.segment_prefix_bytes()),
      bell_(bell),
      ofi_(std::move(ofi)) {
  SLUICE_CHECK(rings.size() == ctx->spec.sources().size());
  const uint32_t S = ctx->ring_segments;
  for (size_t s = 0; s < rings.size(); ++s) {
    in_[s].ring = rings[s].ring;
    in_[s].remote = rings[s].remote;
    in_[s].peer = rings[s].peer;
    in_[s].credit_addr = rings[s].credit_addr;
    in_[s].credit_key = rings[s].credit_key;
    has_remote_ |= in_[s].remote;
    has_local_ |= !in_[s].remote;
  }
  credit_batch_ = std::max<uint32_t>(1, S / 2);
  stats_ = counters::acquire(counters::Role::kTarget, ctx->spec.name(),
                             ctx->spec.targets()[index_].rank, ctx->spec.targets()[index_].slot,
                             static_cast<uint32_t>(in_.size()), ctx->spec.record_size(), S);
  for (uint32_t s = 0; s < in_.size(); ++s) {
    counters::set_peer(stats_, s, ctx->spec.sources()[s].rank, ctx->spec.sources()[s].slot);
  }
  if (has_remote_) {
    SLUICE_CHECK(ofi_ != nullptr);
    cq_.enable_reordering(ofi_->ep->test_unordered());
    wire_ = make_ofi_ring(*ofi_->ep);
    by_message_ = wire_->by_message();
    arrived_.assign(in_.size() * S, 0);
    buffer_of_.assign(in_.size() * S, -1);
    recv_ops_ = std::vector<Op>(in_.size() * S);
    credit_ops_ = std::vector<Op>(in_.size());
    credit_pending_.assign(in_.size(), 0);
    abort_ops_ = std::vector<Op>(in_.size() + 1);
    source_aborted_.assign(in_.size(), 0);
    abort_posted_.assign(in_.size(), 0);
    confirm_ops_ = std::vector<Op>(in_.size());
    confirm_pending_.assign(in_.size(), 0);
    for (uint32_t s = 0; s < in_.size(); ++s) {
      credit_ops_[s] = Op{{}, OpKind::kCreditSend, s, 0, 1, false};
      if (!in_[s].remote) continue;
      abort_ops_[s] = Op{{}, OpKind::kAbortRecv, s, 0, 1, false};
      post_control_receive(*ofi_->ep, ofi_->control, ofi_->control_mr.desc, s, &abort_ops_[s]);
      if (!by_message_) continue;
      // Message path: every segment of the ring is a posted receive. An
      // unordered provider may fill them in any order; the footer's seq
      // says which segment landed where.
      std::vector<uint32_t> order(S);
      for (uint32_t j = 0; j < S; ++j) order[j] = j;
      if (ofi_->ep->test_unordered()) std::shuffle(order.begin(), order.end(), std::mt19937(s + 1));
      for (uint32_t j : order) post_receive(s, j);
    }
    for (const Completion& c : ofi_->backlog) handle(c);
    ofi_->backlog.clear();
  }
  // The inline Latency consume (flow_cores.h) covers a flow whose rings
  // are all local, unordered, with one record size: each segment it takes
  // is one record, proved well formed by its footer alone.
  if (!has_remote_ && !in_.empty() && latency_fast_path(*ctx)) {
    fast_in_.resize(in_.size());
    for (size_t s = 0; s < in_.size(); ++s) {
      fast_in_[s].segments = in_[s].ring.segments;
      fast_in_[s].slot_mask = S - 1;
      fast_in_[s].stride = in_[s].ring.segment_stride;
      fast_in_[s].footer = in_[s].ring.payload_bytes();
    }
    fast_ = fast_in_.data();
    fast_n_ = static_cast<uint32_t>(in_.size());
    fast_credit_batch_ = credit_batch_;
    fast_spin_ = ctx->spin_iterations;
    fast_word_ = uint64_t{ctx->spec.record_size()} | uint64_t{layout::kConsumable} << 32;
    // Records of 56 or 64 B publish in their own line too (layout.h), and
    // this target's process laid the tails out empty (init_region).
    fast_tail_ = latency_tail_offset(ctx->spec, S);
  }
}

FlowTarget::~FlowTarget() { counters::release(stats_); }

void FlowTarget::retire() {
  absorb_fast();
  // Destroyed before every source's END: tell those sources, so that a
  // source waiting for our credit (or a replicate fan-out waiting on us)
  // reports us lost instead of waiting for the rank to exit. A target that
  // failed for good told them when it failed; this sees its messages off.
  if (ended_ != in_.size() || aborts_sent_) send_aborts(true);
  // A source lost (or a failure) may have left a transfer half-received:
  // see ofi::Endpoint::abandon().
  if (ofi_ != nullptr && (failed_ != Status::kOk || ended_ != in_.size() || !lost_.empty()))
    ofi_->ep->abandon();
  // Hand back whatever we hold so that shm sources blocked on us can finish
  // (kept segments too: their keeper is gone with this target).
  if (held_ >= 0 && !in_[held_].remote) release(in_[held_], held_slot_);
  for (size_t s = 0; s < kept_.size(); ++s) {
    for (const Kept& k : kept_[s]) {
      if (!in_[s].remote) release_now(in_[s], k.slot);
    }
    kept_[s].clear();
  }
  for (auto& in : in_) {
    if (!in.remote) publish_credit(in);
  }
  // Let go of the endpoint now, before the kind's members (an ordered
  // flow's sequencer, whose handle may wait up to 200 ms to say goodbye to
  // its owner): the flow's connections end first.
  ofi_.reset();
}

Status FlowTarget::next(Deadline deadline, SegmentView* out) {
  if (fast_ == nullptr) return next_slow(deadline, out);
  absorb_fast();
  const Status s = next_slow(deadline, out);
  fast_spun_ = false;
  export_fast();
  return s;
}

uint64_t FlowTarget::received(uint32_t s) const {
  if (s >= in_.size()) return 0;
  return in_[s].received + (fast_ != nullptr ? fast_[s].taken : 0);
}

// Takes over the fast path's position in every ring, and the segment it
// handed out (released by next_slow as its own).
void FlowTarget::absorb_fast() {
  if (fast_ == nullptr) return;
  for (uint32_t s = 0; s < fast_n_; ++s) {
    count_fast(s);
    In& in = in_[s];
    in.k = fast_[s].k;
    in.released = fast_[s].released;
    in.published = fast_[s].published;
  }
  if (fast_held_ >= 0) {
    held_ = fast_held_;
    held_slot_ = static_cast<uint32_t>((in_[held_].k - 1) % ctx_->ring_segments);
    fast_held_ = -1;
  }
}

// Hands the position in every ring back to the fast path, with the segment
// next_slow handed out (the fast path releases it as its own).
void FlowTarget::export_fast() {
  for (uint32_t s = 0; s < fast_n_; ++s) {
    In& in = in_[s];
    fast_[s].k = in.k;
    fast_[s].released = in.released;
    fast_[s].published = in.published;
    in.counted = in.k;
  }
  if (held_ >= 0) {
    fast_held_ = held_;
    held_ = -1;
  }
}

void FlowTarget::count_fast(uint32_t s) {
  In& in = in_[s];
  const uint64_t taken = fast_[s].k - in.counted;
  if (taken == 0) return;
  counters::add(stats_->segments, taken);
  counters::add(stats_->bytes, taken * ctx_->spec.record_size());
  counters::heard(stats_, s, false, taken);
  in.counted = fast_[s].k;
}

void FlowTarget::return_credit_fast(uint32_t s) {
  In& in = in_[s];
  count_fast(s);
  in.released = fast_[s].released;
  in.published = fast_[s].published;
  publish_credit(in);
  fast_[s].published = in.published;
}

Status FlowTarget::next_slow(Deadline deadline, SegmentView* out) {
  if (failed_ != Status::kOk) [[unlikely]] {
    // Post the abort messages the provider refused when we failed, and
    // drive those in flight: on a provider with manual progress they may
    // wait for it.
    if (ofi_ != nullptr) {
      send_aborts(false);
      const Op& sends = abort_ops_[in_.size()];
      if (sends.kind == OpKind::kAbortSend && sends.count > 0) (void)drain_cq();
    }
    return failed_;
  }
  if (held_ >= 0) {
    release(in_[static_cast<size_t>(held_)], held_slot_);
    held_ = -1;
  }
  if (has_remote_) {
    if (Status s = progress(); s != Status::kOk) return s;
  }
  if (Status s = scan(out); s != Status::kTimeout) return s;
  if (ended_ == in_.size()) {
    // What was consumed last is given back too, so that a source's
    // delivered() counts it (over shm; a remote source is promised no
    // credit after its END).
    for (In& in : in_)
      if (!in.remote) publish_credit(in);
    return end_of_flow();
  }
  return wait(deadline, out);
}

// A Worker parks on this target's doorbell (shm rings) and completion
// queue (ofi rings). Something to report (a failure, the end of the flow)
// is work: no parking then.
bool FlowTarget::arm(WaitSet& set) {
  if (failed_ != Status::kOk || ended_ == in_.size()) return false;
  if (has_remote_) set.add_ofi(this, ofi_->ep.get());
  if (has_local_) {
    bell_->waiting.store(1, std::memory_order_relaxed);
    armed_ = true;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    set.add_word(&bell_->seq, bell_->seq.load(std::memory_order_relaxed));
  }
  return true;
}

void FlowTarget::disarm() {
  if (!armed_) return;
  bell_->waiting.store(0, std::memory_order_relaxed);
  armed_ = false;
}

void FlowTarget::publish_credit(In& in) {
  if (in.published == in.released) return;
  if (!in.remote) {
    shm_ring::return_credit(in.ring, in.released);
    in.published = in.released;
    return;
  }
  // A source whose ring ended needs no more credit (and may be gone); one
  // told that its END arrived is promised nothing more.
  if (in.ended || in.confirmed) return;
  const uint32_t s = index_of(in);
  Op& op = credit_ops_[s];
  if (op.busy) {
    credit_pending_[s] = 1;  // sent when the previous credit completes
    return;
  }
  ofi_->outbox[s] = in.released;
  const ssize_t rc =
      wire_->send_credit(&ofi_->outbox[s], ofi_->outbox_mr.desc,
                         RemoteCredit{in.peer, in.credit_addr, in.credit_key}, index_, &op.ctx);
  if (rc == 0) {
    op.busy = true;
    in.published = in.released;
    return;
  }
  // Never wait to hand out credit: the provider may be busy, or the source
  // may have finished and closed its endpoint. Retried on the next pass.
  credit_pending_[s] = 1;
  if (rc != -FI_EAGAIN) {
    log::debug(ctx_->endpoint_name(false, index_), ": returning credit to ",
               ctx_->peer_name(true, s),
               " failed for now: ", ofi::lib::strerror(static_cast<int>(-rc)));
  }
}

// `slot` is where the segment lies in the ring: k % S, or on the message
// path the buffer it landed in.
void FlowTarget::release(In& in, uint32_t slot) {
  if (!kept_.empty()) [[unlikely]] {
    std::deque<Kept>& q = kept_[index_of(in)];
    if (!q.empty()) {
      q.push_back(Kept{slot, 0, true});
      return;
    }
  }
  release_now(in, slot);
}

uint64_t FlowTarget::keep_held() {
  absorb_fast();
  uint64_t id = 0;
  if (held_ >= 0) {
    if (kept_.empty()) kept_.resize(in_.size());
    id = ++kept_ids_;
    kept_[static_cast<size_t>(held_)].push_back(Kept{held_slot_, id, false});
    held_ = -1;
  }
  export_fast();
  return id;
}

void FlowTarget::release_kept(uint64_t id) {
  for (size_t s = 0; s < kept_.size(); ++s) {
    std::deque<Kept>& q = kept_[s];
    for (Kept& k : q) {
      if (k.id != id || k.done) continue;
      k.done = true;
      while (!q.empty() && q.front().done) {
        release_now(in_[s], q.front().slot);
        q.pop_front();
      }
      return;
    }
  }
}

void FlowTarget::release_now(In& in, uint32_t slot) {
  if (fast_tail_ != 0) empty_tail(in.ring.payload(slot), fast_tail_);  // as next_fast does
  if (in.remote) {
    const uint32_t s = index_of(in);
    const uint32_t S = ctx_->ring_segments;
    if (!by_message_) {
      arrived_[s * S + slot] = 0;
    } else {
      post_receive(s, slot);
    }
  }
  ++in.released;
  if (in.released - in.published >= credit_batch_) publish_credit(in);
}

// Where segment `k` of ring `s` is, if it has arrived: its slot, or -1.
int64_t FlowTarget::locate(uint32_t s, const In& in) const {
  const uint32_t S = ctx_->ring_segments;
  const uint32_t pos = static_cast<uint32_t>(in.k % S);
  if (!in.remote) {
    return shm_ring::arrived(in.ring, in.k) ? int64_t{pos} : -1;
  }
  if (!by_message_) return arrived_[s * S + pos] ? int64_t{pos} : -1;
  return buffer_of_[s * S + pos];
}

// Takes ring s's segment at `slot` (segment in.k) off the ring: it is
// either handed out (held until the next call) or released at once.
void FlowTarget::advance(uint32_t s, In& in, uint32_t flags, uint32_t used) {
  counters::add(stats_->segments, 1);
  counters::add(stats_->bytes, used);
  counters::heard(stats_, s, (flags & layout::kEnd) != 0);
  if (in.remote && by_message_)
    buffer_of_[s * ctx_->ring_segments + in.k % ctx_->ring_segments] = -1;
  ++in.k;
  if (flags & layout::kEnd) {
    in.ended = true;
    if (++ended_ == in_.size()) counters::set_state(stats_, counters::State::kEnded);
  }
}

// kOk with *h if ring s's next segment has arrived and is well formed,
// kTimeout if it has not arrived, or the error that fails the flow.
Status FlowTarget::head(uint32_t s, Head* h) {
  In& in = in_[s];
  if (in.ended) return Status::kTimeout;
  const int64_t where = locate(s, in);
  if (where < 0) return Status::kTimeout;
  h->slot = static_cast<uint32_t>(where);
  Footer* f = in.ring.footer(h->slot);
  if (in.remote && f->seq.load(std::memory_order_relaxed) != in.k + 1) {
    return fail_for_good(corrupt(s, in.k, "its footer carries another sequence number"),
                         ctx_->spec.sources()[s].rank);
  }
  if (f->bytes_used < prefix_) {
    return fail_for_good(corrupt(s, in.k, "it lacks its sequence number"),
                         ctx_->spec.sources()[s].rank);
  }
  h->used = f->bytes_used - prefix_;
  h->flags = f->flags;
  h->data = in.ring.payload(h->slot) + prefix_;
  return check_segment(s, in.k, h);
}

// Releases a segment taken off its ring without handing it out.
void FlowTarget::skip(In& in, uint32_t slot) {
  release(in, slot);
  if (in.ended && !in.remote) publish_credit(in);
}

std::string FlowTarget::corrupt(uint32_t s, uint64_t k, const char* problem) const {
  return ctx_->endpoint_name(false, index_) + ": segment " + std::to_string(k) + " from " +
         ctx_->peer_name(true, s) + " is corrupt (" + problem + "); the flow cannot continue";
}

// Checks a footer and payload written by another process before anything
// is handed to the user: a corrupt segment must never cause an overrun.
Status FlowTarget::check_segment(uint32_t s, uint64_t k, Head* h) {
  const char* problem =
      segment_problem(ctx_->spec, ctx_->payload_bytes, h->used, h->flags, h->data, &h->records);
  if (problem == nullptr) return Status::kOk;
  return fail_for_good(corrupt(s, k, problem), ctx_->spec.sources()[s].rank);
}

// Nothing was ready: spin, then yield, then park (on the doorbell futex, or
// on the completion queue when ofi rings exist), until a segment arrives,
// every source ended, the deadline passes or a source is lost.
Status FlowTarget::wait(Deadline deadline, SegmentView* out) {
  // Credit we were lazy about would now only stall the sources (and a
  // caller polling with try_consume would never hand it back).
  for (auto& in : in_) publish_credit(in);
  if (failed_ != Status::kOk) return failed_;
  if (deadline != kForever) {
    const auto now = Clock::now();
    if (now >= deadline) {
      // try_consume polls land here: they must still learn of a lost
      // source (looked at every kLivenessEvery, so polling stays cheap).
      if (now >= next_liveness_) {
        next_liveness_ = now + kLivenessEvery;
        if (Status s = check_sources(); s != Status::kOk) return s;
        if (Status s = check_stalled(); s != Status::kTimeout) return s;
      }
      error_.clear();  // "nothing ready" needs no message, and building one would allocate
      return Status::kTimeout;
    }
  }
  // The inline fast path spun already (next_fast): go on from there.
  for (uint32_t i = fast_spun_ ? ctx_->spin_iterations : 0;; ++i) {
    if (has_remote_ && (i % kSpinProgressEvery == 0 || i >= ctx_->spin_iterations)) {
      if (Status s = progress(); s != Status::kOk) return s;
    }
    if (Status s = scan(out); s != Status::kTimeout) return s;
    if (ended_ == in_.size()) return end_of_flow();
    if (i < ctx_->spin_iterations) {
      cpu_relax();
      continue;
    }
    if (Clock::now() >= deadline) return fail(Status::kTimeout, describe_wait("deadline passed"));
    if (i < ctx_->spin_iterations + kYieldRounds) {
      sched_yield();
      continue;
    }
    if (Status s = check_sources(); s != Status::kOk) return s;
    if (Status s = check_stalled(); s != Status::kTimeout) return s;
    if (has_remote_) {
      if (Status s = park(deadline); s != Status::kOk) return s;
      continue;
    }
    Status s = Status::kTimeout;
    counters::Park parked(stats_);
    shm_ring::park(&bell_->waiting, &bell_->seq, until(deadline), [&] {
      s = scan(out);
      return s != Status::kTimeout || ended_ == in_.size();
    });
    if (s != Status::kTimeout) return s;
  }
}

// A source that is gone and has nothing more published can never end its
// ring: report it (after scan() drained everything it did publish), unless
// the kind goes on without it.
Status FlowTarget::check_sources() {
  constexpr uint32_t kNone = UINT32_MAX;
  uint32_t left = kNone;  // the first source lost by its rank's leaving
  for (uint32_t s = 0; s < in_.size(); ++s) {
    In& in = in_[s];
    if (in.ended) continue;
    // The abort word first, then the ring: a source publishes before it
    // aborts, so a segment published before the abort is seen as ready.
    const uint32_t aborted = in.remote ? source_aborted_[s] : shm_ring::source_aborted(in.ring);
    const bool ready = locate(s, in) >= 0;
    if (aborted != 0 && !ready) {
      if (go_on_without(s, "aborted: abort(), a failure, or destroyed without close()")) continue;
      // A source aborted after its rank lost another (its abort word): that
      // one is the peer lost, and the message names it.
      const uint32_t cause = layout::abort_cause(aborted);
      std::string why;
      if (cause != layout::kNoCause) {
        if (ctx_->liveness != nullptr) ctx_->liveness->hear_lost(cause);
        why = " after its rank lost rank " + std::to_string(cause) + " of the flow";
        if (std::string lost = lost_reason(ctx_, cause); !lost.empty()) why += " (" + lost + ")";
      }
      return fail_for_good(ctx_->endpoint_name(false, index_) + ": " + ctx_->peer_name(true, s) +
                               host_of(ctx_, ctx_->spec.sources()[s].rank) +
                               " was aborted (abort(), a failure, or destroyed without close())" +
                               why + "; the flow is incomplete",
                           cause != layout::kNoCause ? cause : ctx_->spec.sources()[s].rank);
    }
    const uint32_t rank = ctx_->spec.sources()[s].rank;
    if (std::string why = lost_reason(ctx_, rank); !why.empty()) {
      if (ready) continue;  // drain first
      if (go_on_without(s, why)) continue;
      // A source whose rank left, rather than died, is named only if no
      // other lost source died: the leaving rank mostly left because it
      // had seen that death.
      if (ctx_->liveness->left(rank) && !ctx_->liveness->registry_lost()) {
        if (left == kNone) left = s;
        continue;
      }
      return fail_lost_source(s, why);
    }
  }
  if (left != kNone)
    return fail_lost_source(left, lost_reason(ctx_, ctx_->spec.sources()[left].rank));
  return Status::kOk;
}

Status FlowTarget::fail_lost_source(uint32_t s, const std::string& why) {
  return fail_for_good(ctx_->endpoint_name(false, index_) + ": lost " + ctx_->peer_name(true, s) +
                           " before it closed (after " + std::to_string(in_[s].k) +
                           " of its segments): " + why,
                       ctx_->spec.sources()[s].rank);
}

void FlowTarget::lose(uint32_t s, std::string_view why) {
  note_lost(ctx_->spec.sources()[s].rank);
  in_[s].ended = true;
  ++ended_;
  std::string who = ctx_->peer_name(true, s);
  who.append(" (").append(why).append(")");
  lost_.append(lost_.empty() ? "; lost source(s): " : ", ").append(who);
  log::warn(ctx_->endpoint_name(false, index_), ": going on without ", who);
}

std::string FlowTarget::describe_wait(const char* what) const {
  // The counters slot knows, for the first sources, when each last
  // delivered and which ended: the hang report's line (counters_report.h).
  if (!counters::is_spare(stats_)) {
    counters::Reading r;
    r.role = counters::Role::kTarget;
    r.state = counters::State::kOpen;
    r.peers = static_cast<uint32_t>(in_.size());
    r.peer_detail = counters::read_peers(*stats_);
    const auto host = [this](uint32_t rank) {
      return rank < ctx_->hosts.size() ? ctx_->hosts[rank] : std::string();
    };
    return ctx_->endpoint_name(false, index_) + ": " + what + ", " +
           counters::waiting_for(r, counters::now_ns(), host);
  }
  std::string ranks;
  std::vector<uint32_t> seen;
  for (uint32_t s = 0; s < in_.size(); ++s) {
    if (in_[s].ended) continue;
    const uint32_t r = ctx_->spec.sources()[s].rank;
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
    seen.push_back(r);
    if (!ranks.empty()) ranks += ", ";
    ranks += std::to_string(r) + host_of(ctx_, r);
  }
  return ctx_->endpoint_name(false, index_) + ": " + what + " waiting for sources on rank(s) " +
         ranks + " that have not closed";
}

}  // namespace sluice::detail
