#include "flow/flow_core.h"

#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "common/check.h"
#include "common/futex.h"
#include "flow/wait_set.h"
#include "common/log.h"
#include "common/test_hooks.h"
#include "control/registry_client.h"

namespace sluice::detail {
namespace {

using layout::Footer;
using layout::RingView;

// The sequence number of an ordered segment without records (an END alone).
constexpr uint64_t kNoSequence = ~uint64_t{0};
// A parked thread re-checks deadlines and peer liveness at least this often.
constexpr auto kParkSlice = std::chrono::milliseconds(50);
// A target with both shm and ofi rings parks on its completion queue, which
// shm publishers cannot wake: it looks at its shm rings this often.
constexpr auto kMixedParkSlice = std::chrono::milliseconds(1);
// sched_yield() rounds between spinning and parking: on an oversubscribed
// machine they let the peer we wait for run without paying a futex round trip.
constexpr uint32_t kYieldRounds = 64;
// Full segments for one target are moved by one RMA write of up to this many
// bytes: the cost of a transfer over tcp is mostly per operation (system
// calls, the provider's acknowledgement), not per byte.
constexpr uint32_t kCoalesceBytes = 256 * 1024;
// How long close() drives an ofi source's endpoint before returning.
constexpr auto kCloseFlush = std::chrono::milliseconds(100);
// Replicate flows: how long a transport error waits for the registry to
// confirm that the target's rank is gone before it fails the source.
constexpr auto kLossConfirmation = std::chrono::milliseconds(2000);
// How long a destroyed ofi source waits for its last transfers after a
// successful close().
constexpr auto kLinger = std::chrono::milliseconds(5000);
// How long an endpoint that ends without the guarantee drives its endpoint
// so that its abort message leaves before the endpoint is abandoned.
constexpr auto kAbortFlush = std::chrono::milliseconds(100);
// A parked wait for a provider queue to drain sleeps this long at a time.
constexpr auto kQueueParkSlice = std::chrono::milliseconds(1);
// try_consume / try_push look at peer liveness at most this often.
constexpr auto kLivenessEvery = std::chrono::milliseconds(1);
// Completions read per fi_cq_read.
constexpr size_t kCqBatch = 16;
// While spinning on an ofi ring, drive the completion queue every this many
// iterations (each read may be a system call on tcp).
constexpr uint32_t kSpinProgressEvery = 64;

std::chrono::nanoseconds until(Deadline deadline, std::chrono::nanoseconds slice = kParkSlice) {
  if (deadline == kForever) return slice;
  auto left = deadline - Clock::now();
  return std::min<std::chrono::nanoseconds>(left, slice);
}

std::chrono::milliseconds until_ms(Deadline deadline, std::chrono::milliseconds slice) {
  auto ns = until(deadline, slice);
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(ns));
}

// Wakes the other side if it announced that it parks. The fence orders our
// preceding publication before the load of `waiting`; the waiter has the
// mirror fence between its store of `waiting` and its re-check, so at least
// one side sees the other (Dekker), and no wake-up is lost.
inline void wake_if_waiting(std::atomic<uint32_t>* waiting, std::atomic<uint32_t>* futex_word) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiting->load(std::memory_order_relaxed) != 0) [[unlikely]] {
    futex_word->fetch_add(1, std::memory_order_relaxed);
    futex_wake_all(futex_word);
  }
}

// Why `rank` can no longer be waited for, or empty if it is still alive.
std::string lost_reason(const FlowContext* ctx, uint32_t rank) {
  if (ctx->peers == nullptr) return {};
  if (ctx->peers->registry_lost()) {
    return "lost the connection to the job's registry, so the liveness of rank " + std::to_string(rank) +
           " cannot be known";
  }
  if (ctx->peers->state(rank) != control::PeerTable::kAlive) return ctx->peers->describe(rank);
  return {};
}

std::string host_of(const FlowContext* ctx, uint32_t rank) {
  if (rank < ctx->hosts.size() && !ctx->hosts[rank].empty()) return " on " + ctx->hosts[rank];
  return {};
}

// A libfabric operation in flight. The provider owns `ctx` until the
// operation completes; the completion hands back its address.
enum class OpKind : uint8_t {
  kSegmentSend,
  kCreditRecv,
  kSegmentRecv,
  kCreditSend,
  kAbortRecv,  // also receives the target's END confirmation (kEndConfirmed)
  kAbortSend,
  kConfirmSend,
};
struct Op {
  fi_context2 ctx;  // first: op_context points here
  OpKind kind = OpKind::kSegmentSend;
  uint32_t ring = 0;
  uint32_t slot = 0;
  uint32_t count = 1;  // segment transfers: consecutive slots moved by this one operation
  bool busy = false;
};
static_assert(offsetof(Op, ctx) == 0);

// Reads one endpoint's completion queue for its core: every completion goes
// to the core's `handle(entry)` (which returns false to stop reading), and a
// failed operation to `on_error(text, its context)`, whose status ends the
// read. Test builds can make completions arrive out of order, as on an
// unordered provider (EFA's SRD): every batch is then handled in reverse, and
// one completion is held back until the next batch or until the core parks.
class CompletionReader {
 public:
  void enable_reordering(bool on) { unordered_ = on; }

  // Reads until the queue has no more completions.
  template <class Handle, class OnError>
  Status drain(ofi::Endpoint& ep, Handle&& handle, OnError&& on_error) {
    Completion c[kCqBatch + 1];
    for (;;) {
      std::string err;
      void* failed = nullptr;
      fi_cq_data_entry e[kCqBatch];
      fi_addr_t from[kCqBatch];
      const ssize_t n = ep.poll_from(e, from, kCqBatch, &err, &failed);
      if (Status s = dispatch(c, e, from, n, err, failed, handle, on_error); s != Status::kOk) return s;
      if (n < static_cast<ssize_t>(kCqBatch)) return Status::kOk;
    }
  }

  // Hands over a held-back completion if there is one (a completion must not
  // sleep with its core); otherwise blocks up to `timeout` for completions.
  template <class Handle, class OnError>
  Status wait(ofi::Endpoint& ep, std::chrono::milliseconds timeout, Handle&& handle, OnError&& on_error) {
    if (held_) {
      held_ = false;
      handle(held_entry_);
      return Status::kOk;
    }
    Completion c[kCqBatch + 1];
    fi_cq_data_entry e[kCqBatch];
    fi_addr_t from[kCqBatch];
    std::string err;
    void* failed = nullptr;
    const ssize_t n = ep.wait_from(e, from, kCqBatch, timeout, &err, &failed);
    return dispatch(c, e, from, n, err, failed, handle, on_error);
  }

 private:
  template <class Handle, class OnError>
  Status dispatch(Completion* c, const fi_cq_data_entry* e, const fi_addr_t* from, ssize_t n,
                  const std::string& err, void* failed, Handle& handle, OnError& on_error) {
    if (n < 0) return on_error(err, failed);
    for (ssize_t i = 0; i < n; ++i) c[i] = Completion{e[i], from[i]};
    const size_t m = reorder(c, static_cast<size_t>(n));
    for (size_t i = 0; i < m; ++i) {
      if (!handle(c[i])) break;
    }
    return Status::kOk;
  }

  size_t reorder(Completion* c, size_t n) {
    if (!unordered_) return n;
    std::reverse(c, c + n);
    if (held_) {
      c[n++] = held_entry_;
      held_ = false;
    }
    if (n > 1) {
      held_entry_ = c[0];
      held_ = true;
      std::memmove(static_cast<void*>(c), c + 1, (n - 1) * sizeof(*c));
      --n;
    }
    return n;
  }

  bool unordered_ = false;
  bool held_ = false;
  Completion held_entry_{};
};

// True if message completion `c` came from `peer`, or if the provider cannot
// say who sent it (then the tag is all there is).
inline bool sent_by_peer(const ofi::Endpoint& ep, const Completion& c, fi_addr_t peer) {
  return !ep.knows_sources() || c.from == peer;
}

// The failure state of a source or target: the last error's text, and
// whether the core failed for good (a peer's transport broke, or it sent a
// corrupt segment), after which every call returns that status.
class FailureState {
 protected:
  static constexpr uint32_t kNoRank = UINT32_MAX;

  Status fail(Status s, std::string message) {
    error_ = std::move(message);
    return s;
  }
  // As above, about the peer on `rank` (kNoRank: none in particular).
  Status fail_for_good(std::string message, uint32_t rank = kNoRank) {
    note_lost(rank);
    failed_ = Status::kPeerLost;
    return fail(Status::kPeerLost, std::move(message));
  }
  // The first rank lost, for lost_peer().
  void note_lost(uint32_t rank) {
    if (lost_rank_ == kNoRank) lost_rank_ = rank;
  }
  std::optional<LostPeer> lost_peer(const FlowContext* ctx) const {
    if (lost_rank_ == kNoRank) return std::nullopt;
    LostPeer p{lost_rank_, {}};
    if (lost_rank_ < ctx->hosts.size()) p.host = ctx->hosts[lost_rank_];
    return p;
  }
  Status failed_ = Status::kOk;
  std::string error_;
  uint32_t lost_rank_ = kNoRank;
};

// Posts the receive of peer `index`'s abort message into control[index].
// Without it the peer's end is learnt only from its rank's liveness.
void post_control_receive(ofi::Endpoint& ep, uint64_t* control, void* desc, uint32_t index, Op* op) {
  ssize_t rc = -FI_EAGAIN;
  for (int i = 0; i < 1000 && rc == -FI_EAGAIN; ++i) {
    rc = ep.trecv(&control[index], sizeof(uint64_t), desc, kTagAbort | index, &op->ctx);
    if (rc == -FI_EAGAIN) sched_yield();
  }
  op->busy = rc == 0;
  if (rc != 0) log::warn("cannot post an abort receive: ", fi_strerror(static_cast<int>(-rc)));
}

// Sends this endpoint's abort message (its index, from control[n]) to every
// peer in `to`, then drives the endpoint (`drive` reads its completion queue,
// which counts the sends down in `op`) for at most kAbortFlush so that the
// messages leave before the endpoint is abandoned. Teardown only.
template <class Drive>
void send_abort_messages(ofi::Endpoint& ep, uint64_t* control, uint32_t n, void* desc, uint32_t index,
                         const std::vector<fi_addr_t>& to, Op* op, Drive&& drive) {
  control[n] = index;
  *op = Op{{}, OpKind::kAbortSend, 0, 0, 0, false};
  for (fi_addr_t peer : to) {
    if (ep.tsend(&control[n], sizeof(uint64_t), desc, peer, kTagAbort | index, &op->ctx) == 0) ++op->count;
  }
  for (const auto until = Clock::now() + kAbortFlush; op->count > 0 && Clock::now() < until;) {
    if (drive() != Status::kOk) break;
    if (op->count > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class FlowSource final : public SourceCore, private FailureState {
 public:
  FlowSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings, std::unique_ptr<OfiSource> ofi,
             std::unique_ptr<Sequencer> sequencer)
      : ctx_(ctx),
        index_(index),
        rings_(std::move(rings)),
        out_(rings_.size()),
        lane_store_(rings_.size()),
        lane_of_(rings_.size()),
        sequencer_(std::move(sequencer)),
        ofi_(std::move(ofi)) {
    const FlowSpec& spec = ctx->spec;
    SLUICE_CHECK(rings_.size() == spec.targets.size());
    SLUICE_CHECK((sequencer_ != nullptr) == spec.ordered);
    lanes_ = lane_store_.data();
    num_targets_ = static_cast<uint32_t>(rings_.size());
    prefix_ = spec.segment_prefix_bytes();
    for (uint32_t t = 0; t < num_targets_; ++t) lane_of_[t] = t;
    if (spec.type == FlowType::kReplicate) {
      // One lane per shm target (records go straight into its ring), and one
      // staging lane shared by every ofi target: each segment is written
      // once and moved to each of them from the same staging slot.
      replicate_ = true;
      int64_t lead = -1;
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (rings_[t].remote && lead >= 0) {
          lane_of_[t] = static_cast<uint32_t>(lead);
          rings_[t].ring = rings_[lead].ring;
          continue;
        }
        if (rings_[t].remote) lead = t;
        fan_store_.push_back(t);
      }
      fan_ = fan_store_.data();
      num_fan_ = static_cast<uint32_t>(fan_store_.size());
    }
    die_after_sequence_ = test_hooks::die_after_sequence();
    test_eagain_every_ = test_hooks::ofi_eagain_every();
    route_ = spec.route;
    key_offset_ = spec.key_offset;
    key_size_ = spec.key_size;
    route_fn_ = spec.route_fn;
    latency_ = spec.optimize == Optimize::kLatency;
    const uint32_t S = ctx->ring_segments;
    for (size_t t = 0; t < rings_.size(); ++t) out_[t].limit = S;
    if (ofi_ != nullptr) {
      cq_.enable_reordering(ofi_->ep->test_unordered());
      // Several segments per write need the count in the completion data,
      // which only 8-byte CQ data has room for; messages land in one
      // segment-sized receive each.
      if (ofi_->ep->rma() && ofi_->ep->cq_data_size() >= 8) {
        const uint32_t stride = rings_[0].ring.segment_stride;
        coalesce_ = std::clamp<uint32_t>(kCoalesceBytes / stride, 1, std::max<uint32_t>(1, S / 2));
      }
      ops_ = std::vector<Op>(rings_.size() * S);
      credit_ops_ = std::vector<Op>(rings_.size());
      abort_ops_ = std::vector<Op>(rings_.size() + 1);
      credit_seen_.assign(rings_.size(), 0);
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (!rings_[t].remote) continue;
        for (uint32_t j = 0; j < S; ++j) ops_[t * S + j] = Op{{}, OpKind::kSegmentSend, t, j, 1, false};
        credit_ops_[t] = Op{{}, OpKind::kCreditRecv, t, 0, 1, false};
        ofi_->credits[t] = 0;
        if (!ofi_->ep->rma()) post_credit_receive(t);
        abort_ops_[t] = Op{{}, OpKind::kAbortRecv, t, 0, 1, false};
        post_control_receive(*ofi_->ep, ofi_->control, ofi_->control_mr.desc, t, &abort_ops_[t]);
      }
      target_aborted_.assign(rings_.size(), 0);
      end_confirmed_.assign(rings_.size(), 0);
    }
  }

  ~FlowSource() override {
    if (ofi_ != nullptr && closed_ && failed_ == Status::kOk) {
      // Linger until the provider delivered what we posted (the END above
      // all), so that the process may exit right after; bounded, and cut
      // short when the peer is known to be gone. Transfers still in flight
      // then: leave the endpoint open rather than tear it down under them.
      const auto start = Clock::now();
      const Deadline linger = start + kLinger;
      Status s = drain(linger);
      if (s == Status::kOk) s = await_confirmations(linger);
      if (const auto waited = Clock::now() - start; waited > kCloseFlush) {
        log::debug(ctx_->endpoint_name(true, index_), ": lingered ",
                   std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(),
                   " ms for the last transfers and the targets' confirmations");
      }
      if (s != Status::kOk) {
        // close() succeeded, so nobody else will hear of this: a target
        // may now wait for what never left.
        if (failed_ == Status::kOk) {
          log::warn(ctx_->endpoint_name(true, index_), ": gave up after ", kLinger.count(), " ms: ", error_);
        } else {
          log::warn(ctx_->endpoint_name(true, index_), ": the last transfers after close() failed: ", error_);
        }
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
  }

  // Tells every target that this source ends without END: a ring-header
  // word (shm), an abort message (ofi).
  void signal_abort() {
    if (ofi_ != nullptr) send_aborts();
    for (auto& r : rings_) {
      if (r.remote) continue;
      r.ring.header->source_aborted.store(1, std::memory_order_release);
      r.bell->seq.fetch_add(1, std::memory_order_relaxed);
      futex_wake_all(&r.bell->seq);
    }
  }

  Status reserve(uint32_t t, size_t bytes, Deadline deadline, bool try_only) override {
    if (failed_ != Status::kOk) return failed_;
    if (closed_) return fail(Status::kClosed, ctx_->endpoint_name(true, index_) + ": push after close()");
    if (bytes + prefix_ > ctx_->payload_bytes) {
      const FlowSpec& spec = ctx_->spec;
      return fail(Status::kInvalid,
                  ctx_->endpoint_name(true, index_) + ": a record of " +
                      (spec.record_size != 0 ? std::to_string(bytes) + " bytes"
                                             : "more than " + std::to_string(bytes - kRecordHeaderBytes - 8) +
                                                   " bytes") +
                      " exceeds the largest this flow takes, " + std::to_string(spec.max_record_bytes()) +
                      " bytes (segment_bytes " + std::to_string(spec.effective_segment_bytes()) +
                      "); raise segment_bytes");
    }
    if (t == kAllTargets) return reserve_all(deadline, try_only);
    Out& o = out_[t];
    if (o.filling) {
      const uint32_t used = used_bytes(t);
      if (used == 0) return Status::kOk;  // an empty segment always fits one record
      if (Status s = publish_segment(t, used, 0, deadline, try_only); s != Status::kOk) return s;
    }
    Status s = acquire(t, deadline, try_only);
    if (s != Status::kOk) return s;
    start_segment(t);
    return Status::kOk;
  }

  Status publish(uint32_t t, Deadline deadline, bool try_only) override {
    // Latency mode: the record must go now (its peer may be waiting for it
    // to answer).
    if (t == kAllTargets) {
      // The record is in every live target's ring or staging slot: it is
      // taken. What the provider could not accept yet goes with the next call.
      const Status s = publish_all(used_bytes(rep()), 0, deadline, try_only);
      return s == Status::kWouldBlock || s == Status::kTimeout ? Status::kOk : s;
    }
    Out& o = out_[t];
    const uint64_t k = o.k;
    const Status s = publish_segment(t, used_bytes(t), 0, deadline, try_only);
    if ((s == Status::kWouldBlock || s == Status::kTimeout) && rings_[t].remote && o.posted <= k) {
      // The provider did not take it: take the record back, so that the
      // caller's retry (try_push never waits) cannot send it twice.
      o.k = k;
      o.filling = true;
      lane(t).cur = o.base + prefix_;
      lane(t).end = o.base + ctx_->payload_bytes;
    }
    return s;
  }

  Status flush(Deadline deadline) override {
    if (failed_ != Status::kOk) return failed_;
    if (closed_) return Status::kOk;
    if (replicate_ && out_[rep()].filling && used_bytes(rep()) > prefix_) {
      if (Status s = publish_all(used_bytes(rep()), 0, deadline, false); s != Status::kOk) return s;
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      Out& o = out_[t];
      if (!replicate_ && o.filling && used_bytes(t) != 0) {
        if (Status s = publish_segment(t, used_bytes(t), 0, deadline); s != Status::kOk) return s;
      }
      if (rings_[t].remote && live(t) && o.posted < o.k) {
        if (Status s = post_pending(t, deadline, false); s != Status::kOk) return s;
      }
    }
    return Status::kOk;
  }

  Status close(Deadline deadline) override {
    if (failed_ != Status::kOk) return failed_;
    if (closed_) return Status::kOk;
    if (replicate_) return close_all(deadline);
    Status first = Status::kOk;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      Out& o = out_[t];
      if (o.ended) continue;
      if (!o.filling) {
        Status s = acquire(t, deadline, deadline == Deadline::min());
        if (s != Status::kOk) {
          if (first == Status::kOk) first = s;
          continue;
        }
        start_segment(t);
      }
      // The END flag rides on the last data segment when there is one. It
      // is published (marked) even if handing it to the provider fails for
      // now, so a retry sends only what is pending, never a second END.
      Status s = publish_segment(t, used_bytes(t), layout::kEnd, deadline);
      o.ended = true;
      if (s != Status::kOk) return s;
    }
    if (first != Status::kOk) return first;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (rings_[t].remote && out_[t].posted < out_[t].k) {
        if (Status s = post_pending(t, deadline, false); s != Status::kOk) return s;
      }
    }
    if (Status s = finish_close(deadline); s != Status::kOk) return s;
    if (log::level() >= log::Level::kDebug) {
      for (uint32_t t = 0; t < num_targets_; ++t) {
        log::debug(ctx_->endpoint_name(true, index_), ": closed towards ", ctx_->peer_name(false, t), " after ",
                   out_[t].k, " segments (", out_[t].posted, " handed to the provider)");
      }
    }
    // A target destroyed before our END never consumed everything: the
    // flow did not deliver what it promised. (Only the target's own word
    // counts here: a target rank that consumed our END may well have left.)
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (target_aborted(t)) return lost_target(t, "it was destroyed before the end of the flow");
    }
    return Status::kOk;
  }

  void abort() override {
    if (closed_ || aborted_) return;
    aborted_ = true;
    signal_abort();
    // Every later push goes to reserve(), which reports kClosed.
    for (uint32_t t = 0; t < num_targets_; ++t) lanes_[lane_of_[t]] = Lane{};
    failed_ = Status::kClosed;
    error_ = ctx_->endpoint_name(true, index_) + ": aborted";
  }

  Status wait_delivered(Deadline deadline) override {
    if (!closed_) return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": wait before close()");
    if (ofi_ == nullptr) return failed_;
    if (failed_ != Status::kOk) return failed_;
    if (Status s = drain(deadline); s != Status::kOk) return s;
    return await_confirmations(deadline);
  }

  Status fail_invalid(const char* what) override {
    return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": " + what);
  }

  const std::string& error() const override { return error_; }
  std::optional<LostPeer> lost_peer() const override { return FailureState::lost_peer(ctx_); }

  // A Worker parks on the ring it last found without credit (shm: its
  // credit futex) and on this endpoint's completion queue (ofi).
  bool arm(WaitSet& set) override {
    if (failed_ != Status::kOk) return false;
    if (ofi_ != nullptr) set.add_ofi(this);
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
  void disarm() override {
    if (armed_ == kNotArmed) return;
    rings_[armed_].ring.header->source_waiting.store(0, std::memory_order_relaxed);
    armed_ = kNotArmed;
  }
  void wait_alone(std::chrono::milliseconds timeout) override {
    if (ofi_ != nullptr) (void)park(kForever, timeout);
  }

 private:
  static constexpr uint32_t kNotArmed = ~0u;

  struct Out {
    uint64_t posted = 0;        // ofi: segments handed to the provider; [posted, k) are published, not yet sent
    uint64_t k = 0;             // ring index of the segment being filled, or the next to claim
    uint64_t limit = 0;         // k may be claimed while k < limit (consumed + S, cached)
    std::byte* base = nullptr;  // payload of the segment being filled
    bool filling = false;
    bool ended = false;
    bool dropped = false;  // replicate flows: the target was lost; the others go on
  };

  Lane& lane(uint32_t t) { return lanes_[lane_of_[t]]; }
  bool live(uint32_t t) const { return !out_[t].dropped; }
  bool sent_by(const Completion& c, fi_addr_t peer) const { return sent_by_peer(*ofi_->ep, c, peer); }
  // Replicate flows: every live target fills in lockstep, so any live one
  // speaks for all in lockstep decisions (filling, ended, bytes used). A
  // dropped target's state froze when it was dropped, so it never does.
  uint32_t rep() const {
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t)) return t;
    }
    return 0;  // every target dropped: the source has failed for good
  }

  // Replicate flows: a lost target leaves the fan-out and the source goes on
  // for the others (close() then reports it). True if `t` was dropped.
  // After a transport error (`broken`) the registry usually confirms the
  // peer's death within moments: wait for it a little.
  bool drop_if_lost(uint32_t t, bool broken = false) {
    if (!replicate_ || out_[t].dropped) return out_[t].dropped;
    std::string why = target_lost(t);
    for (const auto give_up = Clock::now() + kLossConfirmation; broken && why.empty() && Clock::now() < give_up;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ofi_ != nullptr) (void)progress();
      why = target_lost(t);
    }
    if (why.empty()) return false;
    note_lost(ctx_->spec.targets[t].rank);
    out_[t].dropped = true;
    if (ofi_ != nullptr) {
      for (uint32_t j = 0; j < ctx_->ring_segments && rings_[t].remote; ++j) ops_[t * ctx_->ring_segments + j].busy = false;
    }
    bool lane_used = false;
    for (uint32_t u = 0; u < num_targets_; ++u) lane_used |= live(u) && lane_of_[u] == lane_of_[t];
    if (!lane_used) {
      std::erase(fan_store_, lane_of_[t]);
      num_fan_ = static_cast<uint32_t>(fan_store_.size());
    }
    std::string who = ctx_->peer_name(false, t);
    who.append(" (").append(why).append(")");
    dropped_.append(dropped_.empty() ? "" : ", ").append(who);
    log::warn(ctx_->endpoint_name(true, index_), ": going on without ", who);
    if (num_fan_ == 0) {
      fail_for_good(ctx_->endpoint_name(true, index_) + ": every target is lost: " + dropped_);
    }
    return true;
  }

  // acquire() for a replicate flow's target, which may be dropped instead.
  Status acquire_live(uint32_t t, Deadline deadline, bool try_only) {
    if (!live(t)) return Status::kOk;
    Status s = acquire(t, deadline, try_only);
    if (s == Status::kPeerLost && drop_if_lost(t)) return failed_;
    return s;
  }
  // Payload bytes of target t's segment being filled, the prefix included.
  uint32_t used_bytes(uint32_t t) { return static_cast<uint32_t>(lane(t).cur - out_[t].base); }

  // Replicate flows: every lane fills in lockstep, so they publish and claim
  // segments together: a segment is published on every target's ring (with
  // one sequence number when ordered), then the next is claimed on all once
  // every target has credit. Each step may be retried after kWouldBlock
  // or kTimeout without losing lockstep.
  Status reserve_all(Deadline deadline, bool try_only) {
    const uint32_t f0 = rep();
    if (out_[f0].filling) {
      const uint32_t used = used_bytes(f0);
      if (used == prefix_) return Status::kOk;  // an empty segment always fits one record
      if (Status s = publish_all(used, 0, deadline, try_only); s != Status::kOk) return s;
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (Status s = acquire_live(t, deadline, try_only); s != Status::kOk) return s;
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t)) start_segment(t);
    }
    return Status::kOk;
  }

  // Publishes the segment being filled on every target (all hold `used`
  // bytes), then hands the ofi ones to the provider.
  Status publish_all(uint32_t used, uint32_t flags, Deadline deadline, bool try_only) {
    if (sequencer_ != nullptr) {
      uint64_t number = kNoSequence;
      if (used > prefix_) {
        std::string why;
        if (sequencer_->take(&number, &why) != Status::kOk) {
          return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot take a sequence number: " + why);
        }
        if (die_after_sequence_ != 0 && ++sequences_taken_ == die_after_sequence_) [[unlikely]] {
          log::warn(ctx_->endpoint_name(true, index_), ": test hook: dying after taking sequence number ", number);
          std::_Exit(17);
        }
      }
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (live(t)) std::memcpy(out_[t].base, &number, sizeof(number));
      }
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t)) mark_published(t, used, flags);
    }
    // A numbered batch is handed to every provider before we return, even
    // from try_push and past the deadline: every target waits for its number,
    // and one left unsent while this source idles would be declared a gap.
    const bool numbered = sequencer_ != nullptr && used > prefix_;
    Status first = Status::kOk;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (!rings_[t].remote || !live(t)) continue;
      Status s = numbered ? post_pending(t, kForever, false) : post_if_due(t, flags, deadline, try_only);
      if (first == Status::kOk) first = s;
    }
    return first;
  }

  Status close_all(Deadline deadline) {
    const uint32_t f0 = rep();
    if (!out_[f0].ended) {
      if (!out_[f0].filling) {
        for (uint32_t t = 0; t < num_targets_; ++t) {
          if (Status s = acquire_live(t, deadline, deadline == Deadline::min()); s != Status::kOk) return s;
        }
        for (uint32_t t = 0; t < num_targets_; ++t) {
          if (live(t)) start_segment(t);
        }
      }
      Status s = publish_all(used_bytes(rep()), layout::kEnd, deadline, false);
      for (auto& o : out_) o.ended = true;
      if (s != Status::kOk) return s;
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t) && rings_[t].remote && out_[t].posted < out_[t].k) {
        if (Status s = post_pending(t, deadline, false); s != Status::kOk) return s;
      }
    }
    if (Status s = finish_close(deadline); s != Status::kOk) return s;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t) && target_aborted(t)) (void)drop_if_lost(t);
    }
    if (failed_ != Status::kOk) return failed_;
    if (!dropped_.empty()) {
      return fail(Status::kPeerLost, ctx_->endpoint_name(true, index_) +
                                         ": closed; every other target got every record, but lost " + dropped_);
    }
    return Status::kOk;
  }

  Status finish_close(Deadline deadline) {
    // close() waits only briefly for the transfers to complete: completing
    // them may need the peer to drive its own endpoint, and the peer's thread
    // may be closing a source towards us at this very moment. The brief wait
    // drives this endpoint, so that every byte is handed to the provider
    // before the caller turns to other work; the source lingers for the
    // completions when it is destroyed.
    if (ofi_ != nullptr) {
      const Deadline brief = std::min(deadline, Clock::now() + kCloseFlush);
      if (Status s = drain(brief); s != Status::kOk && s != Status::kTimeout) return s;
    }
    closed_ = true;
    return Status::kOk;
  }

  void start_segment(uint32_t t) {
    Out& o = out_[t];
    o.base = rings_[t].ring.payload(o.k);
    o.filling = true;
    lane(t).cur = o.base + prefix_;
    lane(t).end = o.base + ctx_->payload_bytes;
  }

  Status publish_segment(uint32_t t, uint32_t used, uint32_t flags, Deadline deadline = kForever,
                         bool try_only = false) {
    mark_published(t, used, flags);
    if (!rings_[t].remote) return Status::kOk;
    return post_if_due(t, flags, deadline, try_only);
  }

  // Writes segment k's footer (the publication itself, on shm).
  void mark_published(uint32_t t, uint32_t used, uint32_t flags) {
    Out& o = out_[t];
    const OutRingRef& r = rings_[t];
    Footer* f = r.ring.footer(o.k);
    f->bytes_used = used;
    f->flags = layout::kConsumable | flags;
    if (!r.remote) {
      // Release: the payload and the two words above become visible no
      // later than seq; pairs with the target's acquire load of seq.
      f->seq.store(o.k + 1, std::memory_order_release);
    } else {
      // The target learns of the segment from its completion, never from
      // the bytes: a NIC may place them in any order.
      f->seq.store(o.k + 1, std::memory_order_relaxed);
    }
    ++o.k;
    o.filling = false;
    lane(t).cur = lane(t).end = nullptr;
    if (!r.remote) wake_if_waiting(&r.bell->waiting, &r.bell->seq);
  }

  // Segments published because they are full (from reserve) wait for a
  // few more to go in one write; flush() posts what waits, and END and
  // Latency-mode segments go at once.
  Status post_if_due(uint32_t t, uint32_t flags, Deadline deadline, bool try_only) {
    Out& o = out_[t];
    const uint32_t S = ctx_->ring_segments;
    // A numbered segment goes at once too: every target waits for it.
    if (latency_ || sequencer_ != nullptr || (flags & layout::kEnd) || o.k - o.posted >= coalesce_ ||
        o.k % S == 0) {
      return post_pending(t, deadline, try_only);
    }
    return Status::kOk;
  }

  // Hands the published, unsent segments of target t to the provider: one
  // RMA write per run of consecutive slots (one message each on the message
  // path). On kWouldBlock / kTimeout nothing is lost: they are retried by
  // the next reserve, flush or close.
  Status post_pending(uint32_t t, Deadline deadline, bool try_only) {
    Out& o = out_[t];
    const uint32_t S = ctx_->ring_segments;
    while (o.posted < o.k) {
      const auto slot = static_cast<uint32_t>(o.posted % S);
      const auto count = static_cast<uint32_t>(std::min<uint64_t>({o.k - o.posted, S - slot, coalesce_}));
      if (Status s = post_range(t, o.posted, slot, count, deadline, try_only); s != Status::kOk) return s;
      o.posted += count;
    }
    // Drives the transfer on providers with manual progress.
    return progress();
  }

  Status post_range(uint32_t t, uint64_t k, uint32_t slot, uint32_t count, Deadline deadline, bool try_only) {
    const OutRingRef& r = rings_[t];
    const uint32_t S = ctx_->ring_segments;
    Op& op = ops_[t * S + slot];
    auto set_busy = [&](bool busy) {
      for (uint32_t j = 0; j < count; ++j) ops_[t * S + slot + j].busy = busy;
    };
    op.count = count;
    set_busy(true);
    for (uint32_t i = 0;; ++i) {
      if (test_eagain_every_ != 0 && ++test_posts_ % test_eagain_every_ == 0) [[unlikely]] {
        // Test hook: the provider refuses this post once, as a full queue would.
        if (Status s = progress(); s != Status::kOk) {
          set_busy(false);
          return s;
        }
        if (try_only) {
          set_busy(false);
          return Status::kWouldBlock;
        }
        continue;
      }
      ssize_t rc;
      const size_t bytes = size_t{count} * r.ring.segment_stride;
      if (ofi_->ep->rma()) {
        rc = ofi_->ep->write_data(r.ring.payload(k), bytes, ofi_->staging_mr.desc,
                                  segment_cq_data(index_, slot, count), r.peer,
                                  r.ring_addr + uint64_t{slot} * r.ring.segment_stride, r.ring_key, &op.ctx);
      } else {
        rc = ofi_->ep->tsend(r.ring.payload(k), bytes, ofi_->staging_mr.desc, r.peer, kTagData | index_, &op.ctx);
      }
      if (rc == 0) return Status::kOk;
      if (rc != -FI_EAGAIN) {
        set_busy(false);
        if (drop_if_lost(t, true)) return failed_;
        return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot send a segment to " +
                                 ctx_->peer_name(false, t) + ": " + fi_strerror(static_cast<int>(-rc)) +
                                 lost_suffix(ctx_->spec.targets[t].rank),
                             ctx_->spec.targets[t].rank);
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
      if (Clock::now() >= deadline) {
        set_busy(false);
        return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) + ": deadline passed while " +
                                          ctx_->peer_name(false, t) + "'s provider queue stayed full");
      }
      if (std::string why = target_lost(t); !why.empty()) {
        set_busy(false);
        return lost_target(t, why);
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

  // Why target t can no longer be delivered to (its rank is lost, or the
  // target was destroyed before this source's END), or empty.
  std::string target_lost(uint32_t t) const {
    if (target_aborted(t)) return "it was destroyed before the end of the flow";
    return lost_reason(ctx_, ctx_->spec.targets[t].rank);
  }
  bool target_aborted(uint32_t t) const {
    return rings_[t].remote ? (!target_aborted_.empty() && target_aborted_[t] != 0)
                            : rings_[t].ring.header->target_aborted.load(std::memory_order_acquire) != 0;
  }

  // Target t is gone for `why`. A shuffle source fails for good (records
  // routed to it cannot be delivered); a replicate source drops it and goes
  // on for the others (acquire_live and the callers of drop_if_lost).
  Status lost_target(uint32_t t, const std::string& why) {
    if (drop_if_lost(t)) return failed_;
    std::string text = ctx_->endpoint_name(true, index_) + ": cannot deliver to " + ctx_->peer_name(false, t) +
                       host_of(ctx_, ctx_->spec.targets[t].rank) + ": " + why;
    return fail_for_good(std::move(text), ctx_->spec.targets[t].rank);
  }

  // Destroyed without close(): tells every remote target that this source
  // ends without its END, and drives the endpoint briefly so that the
  // message leaves before the endpoint is abandoned.
  void send_aborts() {
    std::vector<fi_addr_t> to;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (rings_[t].remote && live(t) && !target_aborted_[t]) to.push_back(rings_[t].peer);
    }
    send_abort_messages(*ofi_->ep, ofi_->control, num_targets_, ofi_->control_mr.desc, index_, to,
                        &abort_ops_[num_targets_], [this] { return progress(); });
  }

  void post_credit_receive(uint32_t t) {
    Op& op = credit_ops_[t];
    op.busy = true;
    ssize_t rc;
    while ((rc = ofi_->ep->trecv(&ofi_->credits[t], sizeof(uint64_t), ofi_->credits_mr.desc, kTagCredit | t,
                                 &op.ctx)) == -FI_EAGAIN) {
      (void)progress();
    }
    if (rc != 0) {
      fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot post a credit receive: " +
                    fi_strerror(static_cast<int>(-rc)));
    }
  }

  std::string lost_suffix(uint32_t rank) const {
    std::string why = lost_reason(ctx_, rank);
    return why.empty() ? std::string() : " (" + why + ")";
  }

  void handle(const Completion& c) {
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
    if ((op->kind == OpKind::kCreditRecv || op->kind == OpKind::kAbortRecv) && !sent_by(c, rings_[op->ring].peer)) {
      // Another endpoint spoke in that target's name: ignore it and listen on.
      log::warn(ctx_->endpoint_name(true, index_), ": ignored a control message for ", ctx_->peer_name(false, op->ring),
                " from another endpoint");
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
          target_aborted_[op->ring] = 1;
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
  Status on_cq_error(const std::string& err, void* failed) {
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
      const uint32_t rank = ctx_->spec.targets[op->ring].rank;
      return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                               ctx_->peer_name(false, op->ring) + " on rank " + std::to_string(rank) +
                               host_of(ctx_, rank) + ": " + err + lost_suffix(rank),
                           rank);
    }
    uint32_t rank = kNoRank;
    for (uint32_t t = 0; t < num_targets_ && rank == kNoRank; ++t) {
      if (rings_[t].remote && !lost_reason(ctx_, ctx_->spec.targets[t].rank).empty()) rank = ctx_->spec.targets[t].rank;
    }
    return fail_for_good(ctx_->endpoint_name(true, index_) + ": " + err + lost_targets(), rank);
  }

  auto cq_handler() {
    return [this](const Completion& c) {
      handle(c);
      return true;
    };
  }
  auto cq_error_handler() {
    return [this](const std::string& err, void* failed) { return on_cq_error(err, failed); };
  }

  Status progress() { return cq_.drain(*ofi_->ep, cq_handler(), cq_error_handler()); }

  bool all_remote_ended() const {
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (rings_[t].remote && !out_[t].ended) return false;
    }
    return true;
  }

  // Blocks on the completion queue for at most a park slice.
  Status park(Deadline deadline, std::chrono::milliseconds slice = kParkSlice);

  std::string lost_targets() const {
    std::string out;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (!rings_[t].remote) continue;
      std::string why = lost_reason(ctx_, ctx_->spec.targets[t].rank);
      if (!why.empty() && out.find(why) == std::string::npos) out += "; " + why;
    }
    return out;
  }

  bool has_credit(uint32_t t) {
    Out& o = out_[t];
    if (!rings_[t].remote) {
      if (o.k < o.limit) return true;
      // Acquire: pairs with the target's release store of consumed, so its
      // reads of the segments it released happen before we overwrite them.
      o.limit = rings_[t].ring.header->consumed.load(std::memory_order_acquire) + ctx_->ring_segments;
      return o.k < o.limit;
    }
    // Over ofi the staging slot must also be free: its previous segment's
    // transfer has completed.
    const uint32_t S = ctx_->ring_segments;
    auto ready = [&] { return o.k < o.limit && !ops_[t * S + o.k % S].busy; };
    if (ready()) return true;
    (void)progress();
    o.limit = credit_seen_[t] + S;
    return ready();
  }

  Status acquire(uint32_t t, Deadline deadline, bool try_only) {
    if (has_credit(t)) [[likely]] return Status::kOk;
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
      error_.clear();  // back-pressure needs no message, and building one would allocate
      return Status::kWouldBlock;
    }
    return wait_for_credit(t, deadline);
  }

  Status wait_for_credit(uint32_t t, Deadline deadline) {
    const bool remote = rings_[t].remote;
    auto* hdr = rings_[t].ring.header;
    const uint32_t target_rank = ctx_->spec.targets[t].rank;
    for (uint32_t i = 0;; ++i) {
      if (has_credit(t)) return Status::kOk;
      if (failed_ != Status::kOk) return failed_;
      // Liveness before the deadline: a caller polling with a past deadline
      // (close(Clock::now()) in a loop) must see a lost target too.
      const bool past = deadline != kForever && Clock::now() >= deadline;
      if (past || i >= ctx_->spin_iterations + kYieldRounds) {
        if (std::string why = target_lost(t); !why.empty()) return lost_target(t, why);
      }
      if (past) {
        return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) + ": deadline passed waiting for credit from " +
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
      hdr->source_waiting.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = hdr->credit_seq.load(std::memory_order_relaxed);
      if (!has_credit(t)) futex_wait(&hdr->credit_seq, seen, until(deadline));
      hdr->source_waiting.store(0, std::memory_order_relaxed);
    }
  }

  // Waits until every live remote target has confirmed that all our
  // segments arrived (kEndConfirmed), the deadline passes or one is lost.
  // Only then may the endpoint close: over tcp, closing while a target still
  // sends credit resets the connection, and what the target had not yet
  // taken from it is lost.
  Status await_confirmations(Deadline deadline) {
    for (;;) {
      if (Status s = progress(); s != Status::kOk) return s;
      uint32_t waiting = num_targets_;  // the first target not yet heard from
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (!rings_[t].remote || !live(t) || target_aborted_[t] || end_confirmed_[t]) continue;
        if (std::string why = lost_reason(ctx_, ctx_->spec.targets[t].rank); !why.empty()) {
          if (drop_if_lost(t)) continue;
          return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                                   ctx_->peer_name(false, t) + ": " + why,
                               ctx_->spec.targets[t].rank);
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

  // Waits until every ofi transfer has completed.
  Status drain(Deadline deadline) {
    auto busy = [&] {
      for (const Op& op : ops_) {
        if (op.busy) return true;
      }
      return false;
    };
    while (busy()) {
      if (Status s = progress(); s != Status::kOk) return s;
      if (!busy()) break;
      if (Clock::now() >= deadline) {
        return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) +
                                          ": deadline passed before the last segments were delivered");
      }
      for (uint32_t t = 0; t < num_targets_; ++t) {
        bool pending = false;
        for (uint32_t j = 0; j < ctx_->ring_segments && rings_[t].remote; ++j) {
          pending |= ops_[t * ctx_->ring_segments + j].busy;
        }
        if (!pending || drop_if_lost(t)) continue;
        if (std::string why = lost_reason(ctx_, ctx_->spec.targets[t].rank); !why.empty()) {
          return fail_for_good(ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                                   ctx_->peer_name(false, t) + ": " + why,
                               ctx_->spec.targets[t].rank);
        }
      }
      if (Status s = park(deadline); s != Status::kOk) return s;
    }
    return Status::kOk;
  }

  const FlowContext* ctx_;
  OpenCore open_{ctx_};  // counts this core in ctx_->open_cores (Cluster's destroy checks it)
  uint32_t index_;
  std::vector<OutRingRef> rings_;
  std::vector<Out> out_;
  std::vector<Lane> lane_store_;
  std::vector<uint32_t> lane_of_;    // [target]: the lane its records go through
  std::vector<uint32_t> fan_store_;  // replicate flows: the lanes every record is copied to
  uint32_t prefix_ = 0;              // ordered flows: the sequence number at the head of each segment
  std::unique_ptr<Sequencer> sequencer_;
  std::string dropped_;  // replicate flows: targets lost and left out
  // Test hooks (common/test_hooks.h): 0 in the installed library.
  uint64_t die_after_sequence_ = 0;  // exit after taking this many sequence numbers
  uint64_t sequences_taken_ = 0;
  uint64_t test_eagain_every_ = 0;  // refuse every n-th post once
  uint64_t test_posts_ = 0;
  uint32_t wait_target_ = kNotArmed;  // the target whose ring last had no credit
  uint32_t armed_ = kNotArmed;        // the ring whose source_waiting a Worker set
  bool closed_ = false;
  bool aborted_ = false;
  // ofi only.
  std::vector<Op> ops_;            // [target * S + slot]: the segment transfer from that staging slot
  std::vector<Op> credit_ops_;     // [target]: the posted credit receive (message path)
  std::vector<Op> abort_ops_;      // [target]: the posted abort receive; [num_targets]: our abort sends
  std::vector<uint8_t> target_aborted_;  // [target]: it told us it ended before our END
  std::vector<uint8_t> end_confirmed_;   // [target]: it told us all up to our END arrived
  std::vector<uint64_t> credit_seen_;  // [target]: highest consumed count heard of
  uint32_t coalesce_ = 1;  // ofi RMA: most segments moved by one write
  CompletionReader cq_;
  // Declared last, so destroyed first: closing the endpoint may still touch
  // the contexts (ops_) of operations in flight.
  std::unique_ptr<OfiSource> ofi_;
};

class FlowTarget final : public TargetCore, private FailureState {
 public:
  FlowTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell, std::vector<InRingRef> rings,
             std::unique_ptr<OfiTarget> ofi, std::unique_ptr<Sequencer> sequencer)
      : ctx_(ctx),
        index_(index),
        bell_(bell),
        in_(rings.size()),
        prefix_(ctx->spec.segment_prefix_bytes()),
        gap_timeout_(std::chrono::milliseconds(ctx->spec.effective_gap_timeout_ms())),
        sequencer_(std::move(sequencer)),
        ofi_(std::move(ofi)) {
    SLUICE_CHECK(rings.size() == ctx->spec.sources.size());
    SLUICE_CHECK((sequencer_ != nullptr) == ctx->spec.ordered);
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
    if (has_remote_) {
      SLUICE_CHECK(ofi_ != nullptr);
      cq_.enable_reordering(ofi_->ep->test_unordered());
      arrived_.assign(in_.size() * S, 0);
      buffer_of_.assign(in_.size() * S, -1);
      recv_ops_ = std::vector<Op>(in_.size() * S);
      credit_ops_ = std::vector<Op>(in_.size());
      credit_pending_.assign(in_.size(), 0);
      abort_ops_ = std::vector<Op>(in_.size() + 1);
      source_aborted_.assign(in_.size(), 0);
      confirm_ops_ = std::vector<Op>(in_.size());
      confirm_pending_.assign(in_.size(), 0);
      for (uint32_t s = 0; s < in_.size(); ++s) {
        credit_ops_[s] = Op{{}, OpKind::kCreditSend, s, 0, 1, false};
        if (!in_[s].remote) continue;
        abort_ops_[s] = Op{{}, OpKind::kAbortRecv, s, 0, 1, false};
        post_control_receive(*ofi_->ep, ofi_->control, ofi_->control_mr.desc, s, &abort_ops_[s]);
        if (ofi_->ep->rma()) continue;
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
  }

  ~FlowTarget() override {
    // Destroyed before every source's END: tell those sources, so that a
    // source waiting for our credit (or a replicate fan-out waiting on us)
    // reports us lost instead of waiting for the rank to exit.
    if (ended_ != in_.size()) send_aborts();
    // A source lost (or a failure) may have left a transfer half-received:
    // see ofi::Endpoint::abandon().
    if (ofi_ != nullptr && (failed_ != Status::kOk || ended_ != in_.size() || !lost_.empty())) ofi_->ep->abandon();
    // Hand back whatever we hold so that shm sources blocked on us can finish.
    if (held_ >= 0 && !in_[held_].remote) release(in_[held_], held_slot_);
    for (auto& in : in_) {
      if (!in.remote) publish_credit(in);
    }
  }

  Status next(Deadline deadline, SegmentView* out) override {
    if (failed_ != Status::kOk) return failed_;
    if (held_ >= 0) {
      release(in_[static_cast<size_t>(held_)], held_slot_);
      held_ = -1;
    }
    if (has_remote_) {
      if (Status s = progress(); s != Status::kOk) return s;
    }
    if (Status s = scan(out); s != Status::kTimeout) return s;
    if (ended_ == in_.size()) return end_of_flow();
    return wait(deadline, out);
  }

  const std::string& error() const override { return error_; }
  std::optional<LostPeer> lost_peer() const override { return FailureState::lost_peer(ctx_); }
  uint64_t gap() const override { return gap_; }

  // A Worker parks on this target's doorbell (shm rings) and completion
  // queue (ofi rings). Something to report (a failure, the end of the flow)
  // is work: no parking then.
  bool arm(WaitSet& set) override {
    if (failed_ != Status::kOk || ended_ == in_.size()) return false;
    if (has_remote_) set.add_ofi(this);
    if (has_local_) {
      bell_->waiting.store(1, std::memory_order_relaxed);
      armed_ = true;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      set.add_word(&bell_->seq, bell_->seq.load(std::memory_order_relaxed));
    }
    return true;
  }
  void disarm() override {
    if (!armed_) return;
    bell_->waiting.store(0, std::memory_order_relaxed);
    armed_ = false;
  }
  void wait_alone(std::chrono::milliseconds timeout) override;

 private:
  struct In {
    RingView ring;
    uint64_t k = 0;          // next segment to read
    uint64_t released = 0;   // segments finished with
    uint64_t published = 0;  // `released` as last told to the source
    uint64_t arrived = 0;    // remote: segments whose transfer completed here
    uint64_t end_seq = 0;    // remote: the END segment's seq (its count), once it arrived
    bool ended = false;
    bool confirmed = false;  // remote: END and all before it arrived, and we said so
    bool remote = false;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    uint64_t credit_addr = 0;
    uint64_t credit_key = 0;
  };

  uint32_t index_of(const In& in) const { return static_cast<uint32_t>(&in - in_.data()); }
  bool sent_by(const Completion& c, fi_addr_t peer) const { return sent_by_peer(*ofi_->ep, c, peer); }

  void send_aborts() {
    bool remote = false;
    for (auto& in : in_) {
      if (in.ended) continue;
      if (!in.remote) {
        // Release: pairs with the source's acquire load in target_lost().
        in.ring.header->target_aborted.store(1, std::memory_order_release);
        in.ring.header->credit_seq.fetch_add(1, std::memory_order_relaxed);
        futex_wake_all(&in.ring.header->credit_seq);
      } else {
        remote = true;
      }
    }
    if (!remote || ofi_ == nullptr) return;
    std::vector<fi_addr_t> to;
    for (uint32_t s = 0; s < in_.size(); ++s) {
      if (!in_[s].ended && in_[s].remote && !source_aborted_[s] && !in_[s].confirmed) to.push_back(in_[s].peer);
    }
    const auto n = static_cast<uint32_t>(in_.size());
    send_abort_messages(*ofi_->ep, ofi_->control, n, ofi_->control_mr.desc, index_, to, &abort_ops_[n],
                        [this] { return drain_cq(); });
  }

  void publish_credit(In& in) {
    if (in.published == in.released) return;
    if (!in.remote) {
      // Release: our reads of the released segments happen before the
      // source, after its acquire load of consumed, overwrites them.
      in.ring.header->consumed.store(in.released, std::memory_order_release);
      in.published = in.released;
      wake_if_waiting(&in.ring.header->source_waiting, &in.ring.header->credit_seq);
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
    ssize_t rc;
    if (ofi_->ep->rma()) {
      rc = ofi_->ep->write_data(&ofi_->outbox[s], sizeof(uint64_t), ofi_->outbox_mr.desc, index_, in.peer,
                                in.credit_addr, in.credit_key, &op.ctx);
    } else {
      rc = ofi_->ep->tsend(&ofi_->outbox[s], sizeof(uint64_t), ofi_->outbox_mr.desc, in.peer, kTagCredit | index_,
                           &op.ctx);
    }
    if (rc == 0) {
      op.busy = true;
      in.published = in.released;
      return;
    }
    // Never wait to hand out credit: the provider may be busy, or the source
    // may have finished and closed its endpoint. Retried on the next pass.
    credit_pending_[s] = 1;
    if (rc != -FI_EAGAIN) {
      log::debug(ctx_->endpoint_name(false, index_), ": returning credit to ", ctx_->peer_name(true, s),
                 " failed for now: ", fi_strerror(static_cast<int>(-rc)));
    }
  }

  void retry_pending_credits() {
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
  void note_arrival(uint32_t s, uint32_t slot) {
    In& in = in_[s];
    const Footer* f = in.ring.footer(slot);
    ++in.arrived;
    if (f->flags & layout::kEnd) in.end_seq = f->seq.load(std::memory_order_relaxed);
    if (!in.confirmed && in.end_seq != 0 && in.arrived >= in.end_seq) {
      in.confirmed = true;  // from here on, no credit goes to this source
      send_confirmation(s);
    }
  }

  void send_confirmation(uint32_t s) {
    const auto n = static_cast<uint32_t>(in_.size());
    Op& op = confirm_ops_[s];
    op = Op{{}, OpKind::kConfirmSend, s, 0, 1, false};
    ofi_->control[n + 1] = kEndConfirmed | index_;
    const ssize_t rc =
        ofi_->ep->tsend(&ofi_->control[n + 1], sizeof(uint64_t), ofi_->control_mr.desc, in_[s].peer,
                        kTagAbort | index_, &op.ctx);
    confirm_pending_[s] = rc == -FI_EAGAIN;
    op.busy = rc == 0;
    if (rc != 0 && rc != -FI_EAGAIN) {
      // The source then waits out its linger and leaves its endpoint open.
      log::debug(ctx_->endpoint_name(false, index_), ": cannot confirm the END of ", ctx_->peer_name(true, s),
                 ": ", fi_strerror(static_cast<int>(-rc)));
    }
  }

  void post_receive(uint32_t s, uint32_t j) {
    Op& op = recv_ops_[s * ctx_->ring_segments + j];
    op = Op{{}, OpKind::kSegmentRecv, s, j, true};
    const RingView& ring = in_[s].ring;
    ssize_t rc;
    while ((rc = ofi_->ep->trecv(ring.payload(j), ring.segment_stride, ofi_->ring_mrs[s].desc, kTagData | s, &op.ctx)) ==
           -FI_EAGAIN) {
      if (progress() != Status::kOk) return;
    }
    if (rc != 0) {
      fail_for_good(ctx_->endpoint_name(false, index_) + ": cannot post a receive: " +
                    fi_strerror(static_cast<int>(-rc)));
    }
  }

  // `slot` is where the segment lies in the ring: k % S, or on the message
  // path the buffer it landed in.
  void release(In& in, uint32_t slot) {
    if (in.remote) {
      const uint32_t s = index_of(in);
      const uint32_t S = ctx_->ring_segments;
      if (ofi_->ep->rma()) {
        arrived_[s * S + slot] = 0;
      } else {
        post_receive(s, slot);
      }
    }
    ++in.released;
    if (in.released - in.published >= credit_batch_) publish_credit(in);
  }

  // Where segment `k` of ring `s` is, if it has arrived: its slot, or -1.
  int64_t locate(uint32_t s, const In& in) const {
    const uint32_t S = ctx_->ring_segments;
    const uint32_t pos = static_cast<uint32_t>(in.k % S);
    if (!in.remote) {
      // Acquire: pairs with the source's release store of seq; the payload,
      // bytes_used and flags are complete once we see k + 1.
      return in.ring.footer(in.k)->seq.load(std::memory_order_acquire) == in.k + 1 ? int64_t{pos} : -1;
    }
    if (ofi_->ep->rma()) return arrived_[s * S + pos] ? int64_t{pos} : -1;
    return buffer_of_[s * S + pos];
  }

  // Takes ring s's segment at `slot` (segment in.k) off the ring: it is
  // either handed out (held until the next call) or released at once.
  void advance(uint32_t s, In& in, uint32_t flags) {
    if (in.remote && !ofi_->ep->rma()) buffer_of_[s * ctx_->ring_segments + in.k % ctx_->ring_segments] = -1;
    ++in.k;
    if (flags & layout::kEnd) {
      in.ended = true;
      ++ended_;
    }
  }

  // Ordered flows: hands out the segment carrying sequence number
  // `expected_`, wherever it is. Every ring's head is its lowest number (a
  // source takes numbers in increasing order), so only heads are looked at.
  // Segments without records and ones that come after their number was
  // declared a gap are released on the way.
  Status scan_ordered(SegmentView* out) {
    const auto n = static_cast<uint32_t>(in_.size());
    for (;;) {
      bool moved = false;
      ahead_ = false;
      for (uint32_t s = 0; s < n; ++s) {
        Head h;
        if (Status st = head(s, &h); st != Status::kOk) {
          if (st == Status::kTimeout) continue;
          return st;
        }
        In& in = in_[s];
        uint64_t number;
        std::memcpy(&number, h.data - prefix_, sizeof(number));
        const bool records = h.used > 0;
        if (records && number > expected_) {
          ahead_ = true;
          continue;
        }
        advance(s, in, h.flags);
        if (!records || number < expected_) {
          if (records) {
            ++late_;
            log::warn(ctx_->endpoint_name(false, index_), ": dropped sequence number ", number, " from ",
                      ctx_->peer_name(true, s), ": it arrived after it was reported as a gap");
          }
          skip(in, h.slot);
          moved = true;
          continue;
        }
        ++expected_;
        gap_since_ = Deadline::max();
        held_ = static_cast<int>(s);
        held_slot_ = h.slot;
        *out = SegmentView{h.data, h.used, s, number};
        return Status::kOk;
      }
      if (!moved) return Status::kTimeout;
    }
  }

  // Ordered flows, when nothing is deliverable: if sequence number
  // `expected_` is known to have been taken and has not arrived for the gap
  // timeout, it is reported as a gap and skipped. Known: a ring holds a
  // later number (its source took it after ours was taken), or a source was
  // lost and the sequencer says the number was taken. (A number that is
  // merely the latest taken, by a source that is slow but alive, is never a
  // gap: that source will publish it.)
  Status check_gap() {
    const auto now = Clock::now();
    bool taken = ahead_;
    if (!taken && !lost_.empty() && now >= next_peek_) {
      next_peek_ = now + gap_timeout_ / 4;
      // A sequencer that cannot be read (its owner finished first) says
      // nothing; a later ring head still can.
      uint64_t count = 0;
      std::string why;
      taken = sequencer_->taken(&count, &why) == Status::kOk && count > expected_;
      peek_taken_ = taken;
    } else if (!taken) {
      taken = peek_taken_;
    }
    if (!taken) {
      gap_since_ = Deadline::max();
      return Status::kTimeout;
    }
    if (gap_since_ == Deadline::max()) gap_since_ = now;
    if (now - gap_since_ < gap_timeout_) return Status::kTimeout;
    return report_gap();
  }

  Status report_gap() {
    gap_ = expected_++;
    gap_since_ = Deadline::max();
    peek_taken_ = false;
    next_peek_ = Clock::now();
    return fail(Status::kGap, ctx_->endpoint_name(false, index_) + ": sequence number " + std::to_string(gap_) +
                                  " never arrived within " + std::to_string(gap_timeout_.count()) +
                                  " ms (its source may have died after taking it)" + lost_);
  }

  // Every ring ended. If every source closed, each number taken was
  // delivered (a source publishes what it numbers before it closes). If one
  // was lost, numbers taken but never delivered are gaps, and then the flow
  // ends incomplete.
  Status end_of_flow() {
    if (sequencer_ == nullptr || lost_.empty()) return Status::kEndOfFlow;
    uint64_t count = 0;
    std::string why;
    if (sequencer_->taken(&count, &why) == Status::kOk && count > expected_) return report_gap();
    return fail(Status::kPeerLost, ctx_->endpoint_name(false, index_) + ": ended without" + lost_.substr(1) +
                                       (why.empty() ? "" : "; the sequencer could not be read: " + why));
  }

  // The segment at the head of ring s, past an ordered flow's sequence
  // number: where it lies, its records and flags.
  struct Head {
    uint32_t slot = 0;
    uint32_t used = 0;
    uint32_t flags = 0;
    const std::byte* data = nullptr;
  };

  // kOk with *h if ring s's next segment has arrived and is well formed,
  // kTimeout if it has not arrived, or the error that fails the flow.
  Status head(uint32_t s, Head* h) {
    In& in = in_[s];
    if (in.ended) return Status::kTimeout;
    const int64_t where = locate(s, in);
    if (where < 0) return Status::kTimeout;
    h->slot = static_cast<uint32_t>(where);
    Footer* f = in.ring.footer(h->slot);
    if (in.remote && f->seq.load(std::memory_order_relaxed) != in.k + 1) {
      return fail_for_good(corrupt(s, in.k, "its footer carries another sequence number"), ctx_->spec.sources[s].rank);
    }
    if (f->bytes_used < prefix_) {
      return fail_for_good(corrupt(s, in.k, "it lacks its sequence number"), ctx_->spec.sources[s].rank);
    }
    h->used = f->bytes_used - prefix_;
    h->flags = f->flags;
    h->data = in.ring.payload(h->slot) + prefix_;
    return check_segment(s, in.k, h->used, h->flags, h->data);
  }

  // Releases a segment taken off its ring without handing it out.
  void skip(In& in, uint32_t slot) {
    release(in, slot);
    if (in.ended && !in.remote) publish_credit(in);
  }

  // One pass over the rings, starting after the last one served (fairness).
  // kOk with *out set, kTimeout if nothing is ready, or an error.
  Status scan(SegmentView* out) {
    if (sequencer_ != nullptr) return scan_ordered(out);
    const auto n = static_cast<uint32_t>(in_.size());
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t s = next_ + i;
      if (s >= n) s -= n;
      Head h;
      if (Status st = head(s, &h); st != Status::kOk) {
        if (st == Status::kTimeout) continue;
        return st;
      }
      In& in = in_[s];
      advance(s, in, h.flags);
      if (h.used == 0) {
        skip(in, h.slot);
        continue;
      }
      held_ = static_cast<int>(s);
      held_slot_ = h.slot;
      next_ = s + 1 == n ? 0 : s + 1;
      *out = SegmentView{h.data, h.used, s};
      return Status::kOk;
    }
    return Status::kTimeout;
  }

  std::string corrupt(uint32_t s, uint64_t k, const char* problem) const {
    return ctx_->endpoint_name(false, index_) + ": segment " + std::to_string(k) + " from " +
           ctx_->peer_name(true, s) + " is corrupt (" + problem + "); the flow cannot continue";
  }

  // Checks a footer and payload written by another process before anything
  // is handed to the user: a corrupt segment must never cause an overrun.
  Status check_segment(uint32_t s, uint64_t k, uint32_t used, uint32_t flags, const std::byte* data) {
    const char* problem = segment_problem(ctx_->spec, ctx_->payload_bytes, used, flags, data);
    if (problem == nullptr) return Status::kOk;
    return fail_for_good(corrupt(s, k, problem), ctx_->spec.sources[s].rank);
  }

  void handle(const Completion& c) {
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
      for (uint64_t j = 0; j < count; ++j) {
        arrived_[s * S + slot + j] = 1;
        note_arrival(static_cast<uint32_t>(s), static_cast<uint32_t>(slot + j));
      }
      return;
    }
    if (e.op_context == nullptr || ofi_->ep->is_data_receive(e.op_context)) return;
    Op* op = static_cast<Op*>(e.op_context);
    if ((op->kind == OpKind::kSegmentRecv || op->kind == OpKind::kAbortRecv) && !sent_by(c, in_[op->ring].peer)) {
      fail_for_good(ctx_->endpoint_name(false, index_) + ": an endpoint other than " +
                    ctx_->peer_name(true, op->ring) + " sent a message in its name");
      return;
    }
    switch (op->kind) {
      case OpKind::kSegmentRecv: {
        op->busy = false;
        In& in = in_[op->ring];
        const uint64_t seq = in.ring.footer(op->slot)->seq.load(std::memory_order_relaxed);
        if (e.len != in.ring.segment_stride || seq <= in.k || seq > in.k + S) {
          fail_for_good(corrupt(op->ring, in.k, "a message of unexpected size or sequence number"),
                        ctx_->spec.sources[op->ring].rank);
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
        source_aborted_[op->ring] = 1;
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
  Status on_cq_error(const std::string& err, void* failed) {
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
      const uint32_t rank = ctx_->spec.sources[op->ring].rank;
      std::string why = lost_reason(ctx_, rank);
      return fail_for_good(ctx_->endpoint_name(false, index_) + ": lost " + ctx_->peer_name(true, op->ring) +
                               " on rank " + std::to_string(rank) + host_of(ctx_, rank) + ": " + err +
                               (why.empty() ? "" : " (" + why + ")"),
                           rank);
    }
    uint32_t rank = kNoRank;
    for (uint32_t s = 0; s < in_.size() && rank == kNoRank; ++s) {
      if (in_[s].remote && !in_[s].ended && !lost_reason(ctx_, ctx_->spec.sources[s].rank).empty()) {
        rank = ctx_->spec.sources[s].rank;
      }
    }
    return fail_for_good(ctx_->endpoint_name(false, index_) + ": " + err + lost_sources(), rank);
  }

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
  Status progress() {
    if (Status s = drain_cq(); s != Status::kOk) return s;
    retry_pending_credits();
    return failed_;
  }

  Status park(Deadline deadline) {
    const auto slice = has_local_ ? kMixedParkSlice : kParkSlice;
    if (Status s = cq_.wait(*ofi_->ep, until_ms(deadline, slice), cq_handler(), cq_error_handler());
        s != Status::kOk) {
      return s;
    }
    return failed_;
  }

  std::string lost_sources() const {
    std::string out;
    for (uint32_t s = 0; s < in_.size(); ++s) {
      if (!in_[s].remote || in_[s].ended) continue;
      std::string why = lost_reason(ctx_, ctx_->spec.sources[s].rank);
      if (!why.empty() && out.find(why) == std::string::npos) out += "; " + why;
    }
    return out;
  }

  // Nothing was ready: spin, then yield, then park (on the doorbell futex, or
  // on the completion queue when ofi rings exist), until a segment arrives,
  // every source ended, the deadline passes or a source is lost.
  Status wait(Deadline deadline, SegmentView* out) {
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
          if (sequencer_ != nullptr) {
            if (ended_ == in_.size()) return end_of_flow();
            if (Status s = check_gap(); s != Status::kTimeout) return s;
          }
        }
        error_.clear();  // "nothing ready" needs no message, and building one would allocate
        return Status::kTimeout;
      }
    }
    for (uint32_t i = 0;; ++i) {
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
      if (sequencer_ != nullptr) {
        if (ended_ == in_.size()) return end_of_flow();
        if (Status s = check_gap(); s != Status::kTimeout) return s;
      }
      if (has_remote_) {
        if (Status s = park(deadline); s != Status::kOk) return s;
        continue;
      }
      bell_->waiting.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = bell_->seq.load(std::memory_order_relaxed);
      Status s = scan(out);
      if (s == Status::kTimeout && ended_ < in_.size()) futex_wait(&bell_->seq, seen, until(deadline));
      bell_->waiting.store(0, std::memory_order_relaxed);
      if (s != Status::kTimeout) return s;
    }
  }

  // A source that is gone and has nothing more published can never end its
  // ring: report it (after scan() drained everything it did publish).
  Status check_sources() {
    for (uint32_t s = 0; s < in_.size(); ++s) {
      In& in = in_[s];
      if (in.ended) continue;
      // The abort word first, then the ring: a source publishes before it
      // aborts, so a segment published before the abort is seen as ready.
      const bool aborted = in.remote ? source_aborted_[s] != 0
                                     : in.ring.header->source_aborted.load(std::memory_order_acquire) != 0;
      const bool ready = locate(s, in) >= 0;
      if (aborted && !ready) {
        if (sequencer_ != nullptr) {
          lose(s, "aborted: abort(), or destroyed without close()");
          continue;
        }
        return fail_for_good(ctx_->endpoint_name(false, index_) + ": " + ctx_->peer_name(true, s) +
                                 host_of(ctx_, ctx_->spec.sources[s].rank) +
                                 " was aborted (abort(), or destroyed without close()); the flow is incomplete",
                             ctx_->spec.sources[s].rank);
      }
      const uint32_t rank = ctx_->spec.sources[s].rank;
      if (std::string why = lost_reason(ctx_, rank); !why.empty()) {
        if (ready) continue;  // drain first
        if (sequencer_ != nullptr) {
          // An ordered flow goes on without it: what it published is
          // delivered, what it took and never published becomes a gap.
          lose(s, why);
          continue;
        }
        return fail_for_good(ctx_->endpoint_name(false, index_) + ": lost " + ctx_->peer_name(true, s) +
                                 " before it closed (after " + std::to_string(in.k) + " of its segments): " + why,
                             rank);
      }
    }
    return Status::kOk;
  }

  void lose(uint32_t s, const std::string& why) {
    note_lost(ctx_->spec.sources[s].rank);
    in_[s].ended = true;
    ++ended_;
    std::string who = ctx_->peer_name(true, s);
    who.append(" (").append(why).append(")");
    lost_.append(lost_.empty() ? "; lost source(s): " : ", ").append(who);
    log::warn(ctx_->endpoint_name(false, index_), ": going on without ", who);
  }

  std::string describe_wait(const char* what) const {
    std::string ranks;
    std::vector<uint32_t> seen;
    for (uint32_t s = 0; s < in_.size(); ++s) {
      if (in_[s].ended) continue;
      const uint32_t r = ctx_->spec.sources[s].rank;
      if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
      seen.push_back(r);
      if (!ranks.empty()) ranks += ", ";
      ranks += std::to_string(r) + host_of(ctx_, r);
    }
    return ctx_->endpoint_name(false, index_) + ": " + what + " waiting for sources on rank(s) " + ranks +
           " that have not closed";
  }

  const FlowContext* ctx_;
  OpenCore open_{ctx_};  // counts this core in ctx_->open_cores (Cluster's destroy checks it)
  uint32_t index_;
  layout::Doorbell* bell_;
  std::vector<In> in_;
  uint32_t credit_batch_ = 1;
  uint32_t next_ = 0;
  uint32_t ended_ = 0;
  int held_ = -1;
  uint32_t held_slot_ = 0;
  bool has_remote_ = false;
  bool has_local_ = false;
  bool armed_ = false;  // a Worker set bell_->waiting
  // Ordered replicate flows only.
  uint32_t prefix_ = 0;
  std::chrono::milliseconds gap_timeout_;
  std::unique_ptr<Sequencer> sequencer_;
  uint64_t expected_ = 0;  // the next sequence number to hand out
  uint64_t gap_ = 0;       // the last one reported missing
  uint64_t late_ = 0;      // segments dropped because they came after their gap
  bool ahead_ = false;     // the last scan saw a ring holding a later number
  bool peek_taken_ = false;
  Deadline gap_since_ = Deadline::max();
  Deadline next_peek_{};
  std::string lost_;  // sources the flow went on without
  // ofi only.
  std::vector<uint8_t> arrived_;     // RMA: [source * S + slot] a segment landed there
  std::vector<int32_t> buffer_of_;   // messages: [source * S + k % S] the buffer segment k landed in
  std::vector<Op> recv_ops_;         // messages: [source * S + buffer]
  std::vector<Op> credit_ops_;       // [source]: the credit transfer in flight
  std::vector<uint8_t> credit_pending_;
  std::vector<Op> abort_ops_;           // [source]: the posted abort receive; [num_sources]: our abort sends
  std::vector<uint8_t> source_aborted_;  // [source]: it told us it was destroyed without close()
  std::vector<Op> confirm_ops_;           // [source]: the END confirmation sent to it
  std::vector<uint8_t> confirm_pending_;  // [source]: that confirmation awaits a retry
  Deadline next_liveness_{};
  CompletionReader cq_;
  // Declared last, so destroyed first: closing the endpoint may still touch
  // the contexts (recv_ops_, credit_ops_) of operations in flight.
  std::unique_ptr<OfiTarget> ofi_;
};

Status FlowSource::park(Deadline deadline, std::chrono::milliseconds slice) {
  return cq_.wait(*ofi_->ep, until_ms(deadline, slice), cq_handler(), cq_error_handler());
}

Status FlowTarget::drain_cq() { return cq_.drain(*ofi_->ep, cq_handler(), cq_error_handler()); }

void FlowTarget::wait_alone(std::chrono::milliseconds timeout) {
  if (has_remote_) (void)cq_.wait(*ofi_->ep, timeout, cq_handler(), cq_error_handler());
}

}  // namespace

std::string FlowContext::endpoint_name(bool source, uint32_t index) const {
  return "flow '" + spec.name + "' " + peer_name(source, index);
}

std::string FlowContext::peer_name(bool source, uint32_t index) const {
  const Endpoint& e = source ? spec.sources[index] : spec.targets[index];
  return std::string(source ? "source" : "target") + " (" + std::to_string(e.rank) + "," + std::to_string(e.slot) + ")";
}

std::unique_ptr<SourceCore> make_source(const FlowContext* ctx, uint32_t source_index, std::vector<OutRingRef> rings,
                                        std::unique_ptr<OfiSource> ofi, std::unique_ptr<Sequencer> sequencer) {
  return std::make_unique<FlowSource>(ctx, source_index, std::move(rings), std::move(ofi), std::move(sequencer));
}

std::unique_ptr<TargetCore> make_target(const FlowContext* ctx, uint32_t target_index, layout::Doorbell* bell,
                                        std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi,
                                        std::unique_ptr<Sequencer> sequencer) {
  return std::make_unique<FlowTarget>(ctx, target_index, bell, std::move(rings), std::move(ofi),
                                      std::move(sequencer));
}

// The buffers belong to the endpoint (ofi::Endpoint::allocate): it frees
// them after closing, or keeps them if it was abandoned.
OfiSource::~OfiSource() = default;
OfiTarget::~OfiTarget() = default;

void init_region(std::byte* base, const layout::Geometry& g, const std::vector<uint32_t>& local_targets) {
  SLUICE_CHECK(local_targets.size() == g.local_targets);
  auto* rh = reinterpret_cast<layout::RegionHeader*>(base);
  rh->magic = layout::kRegionMagic;
  rh->version = layout::kLayoutVersion;
  rh->local_targets = g.local_targets;
  rh->sources = g.sources;
  rh->ring_segments = g.ring_segments;
  rh->segment_stride = g.segment_stride;
  rh->payload_bytes = g.payload_bytes();
  rh->ring_stride = g.ring_stride;
  rh->rings_offset = g.rings_offset;
  rh->total_bytes = g.total_bytes;
  for (uint32_t lt = 0; lt < g.local_targets; ++lt) {
    new (base + g.doorbell_offset(lt)) layout::Doorbell{};
    for (uint32_t s = 0; s < g.sources; ++s) {
      auto* h = new (base + g.ring_offset(lt, s)) layout::RingHeader{};
      h->magic = layout::kRingMagic;
      h->source = s;
      h->target = local_targets[lt];
      h->ring_segments = g.ring_segments;
      h->segment_stride = g.segment_stride;
      RingView ring(base + g.ring_offset(lt, s), g.ring_segments, g.segment_stride);
      for (uint32_t k = 0; k < g.ring_segments; ++k) new (ring.footer(k)) Footer{};
    }
  }
}

const char* segment_problem(const FlowSpec& spec, uint32_t payload_bytes, uint32_t used, uint32_t flags,
                            const std::byte* data) {
  const uint32_t room = payload_bytes - std::min(payload_bytes, spec.segment_prefix_bytes());
  if (!(flags & layout::kConsumable)) return "flags lack CONSUMABLE";
  if (used > room) return "bytes_used exceeds the segment payload";
  if (spec.record_size != 0 && used % spec.record_size != 0) return "bytes_used is not a whole number of records";
  if (spec.record_size == 0 && !validate_records(data, used)) return "a record length overruns the segment";
  return nullptr;
}

bool validate_records(const std::byte* data, uint32_t bytes) {
  uint32_t off = 0;
  while (off < bytes) {
    if (bytes - off < kRecordHeaderBytes) return false;
    uint32_t len;
    std::memcpy(&len, data + off, sizeof(len));
    if (len > bytes - off - kRecordHeaderBytes) return false;
    const size_t stride = record_stride(len);
    if (stride > bytes - off) return false;
    off += static_cast<uint32_t>(stride);
  }
  return true;
}

}  // namespace sluice::detail
