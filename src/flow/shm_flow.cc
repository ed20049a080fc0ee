#include "flow/shm_flow.h"

#include <sched.h>

#include <atomic>
#include <cstring>

#include "common/check.h"
#include "common/futex.h"
#include "common/log.h"
#include "control/registry_client.h"

namespace sluice::detail {
namespace {

using layout::Footer;
using layout::RingView;

// A parked thread re-checks deadlines and peer liveness at least this often.
constexpr auto kParkSlice = std::chrono::milliseconds(50);
// sched_yield() rounds between spinning and parking: on an oversubscribed
// machine they let the peer we wait for run without paying a futex round trip.
constexpr uint32_t kYieldRounds = 64;

std::chrono::nanoseconds until(Deadline deadline) {
  if (deadline == kForever) return kParkSlice;
  auto left = deadline - Clock::now();
  return std::min<std::chrono::nanoseconds>(left, kParkSlice);
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

class ShmSource final : public SourceCore {
 public:
  ShmSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings)
      : ctx_(ctx), index_(index), rings_(std::move(rings)), out_(rings_.size()), lane_store_(rings_.size()) {
    const FlowSpec& spec = ctx->spec;
    SLUICE_CHECK(rings_.size() == spec.targets.size());
    lanes_ = lane_store_.data();
    num_targets_ = static_cast<uint32_t>(rings_.size());
    route_ = spec.route;
    key_offset_ = spec.key_offset;
    key_size_ = spec.key_size;
    route_fn_ = spec.route_fn;
    latency_ = spec.optimize == Optimize::kLatency;
    for (size_t t = 0; t < rings_.size(); ++t) out_[t].limit = ctx->ring_segments;
  }

  ~ShmSource() override {
    if (closed_) return;
    // Destroyed without close(): tell every target, so that it reports the
    // flow incomplete rather than waiting for an END that cannot come.
    for (auto& r : rings_) {
      r.ring.header->source_aborted.store(1, std::memory_order_release);
      r.bell->seq.fetch_add(1, std::memory_order_relaxed);
      futex_wake_all(&r.bell->seq);
    }
  }

  Status reserve(uint32_t t, size_t bytes, Deadline deadline, bool try_only) override {
    if (closed_) return fail(Status::kClosed, ctx_->endpoint_name(true, index_) + ": push after close()");
    if (bytes > ctx_->payload_bytes) {
      return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": a record of " + std::to_string(bytes) +
                                        " bytes (with framing) does not fit a segment's payload of " +
                                        std::to_string(ctx_->payload_bytes) + " bytes; raise segment_bytes");
    }
    Out& o = out_[t];
    if (o.filling) {
      const auto used = static_cast<uint32_t>(lanes_[t].cur - o.base);
      if (used == 0) return Status::kOk;  // an empty segment always fits one record
      publish_segment(t, used, 0);
    }
    Status s = acquire(t, deadline, try_only);
    if (s != Status::kOk) return s;
    start_segment(t);
    return Status::kOk;
  }

  Status publish(uint32_t t) override {
    Out& o = out_[t];
    publish_segment(t, static_cast<uint32_t>(lanes_[t].cur - o.base), 0);
    return Status::kOk;
  }

  Status flush(Deadline) override {
    if (closed_) return Status::kOk;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      Out& o = out_[t];
      if (o.filling && lanes_[t].cur != o.base) publish_segment(t, static_cast<uint32_t>(lanes_[t].cur - o.base), 0);
    }
    return Status::kOk;
  }

  Status close(Deadline deadline) override {
    if (closed_) return Status::kOk;
    Status first = Status::kOk;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      Out& o = out_[t];
      if (o.ended) continue;
      if (!o.filling) {
        Status s = acquire(t, deadline, false);
        if (s != Status::kOk) {
          if (first == Status::kOk) first = s;
          continue;
        }
        start_segment(t);
      }
      // The END flag rides on the last data segment when there is one.
      publish_segment(t, static_cast<uint32_t>(lanes_[t].cur - o.base), layout::kEnd);
      o.ended = true;
    }
    if (first == Status::kOk) closed_ = true;
    return first;
  }

  Status fail_invalid(const char* what) override {
    return fail(Status::kInvalid, ctx_->endpoint_name(true, index_) + ": " + what);
  }

  const std::string& error() const override { return error_; }

 private:
  struct Out {
    uint64_t k = 0;           // ring index of the segment being filled, or the next to claim
    uint64_t limit = 0;       // k may be claimed while k < limit (consumed + S, cached)
    std::byte* base = nullptr;  // payload of the segment being filled
    bool filling = false;
    bool ended = false;
  };

  Status fail(Status s, std::string message) {
    error_ = std::move(message);
    return s;
  }

  void start_segment(uint32_t t) {
    Out& o = out_[t];
    o.base = rings_[t].ring.payload(o.k);
    o.filling = true;
    lanes_[t].cur = o.base;
    lanes_[t].end = o.base + ctx_->payload_bytes;
  }

  void publish_segment(uint32_t t, uint32_t used, uint32_t flags) {
    Out& o = out_[t];
    const RingView& ring = rings_[t].ring;
    Footer* f = ring.footer(o.k);
    f->bytes_used = used;
    f->flags = layout::kConsumable | flags;
    // Release: the payload and the two words above become visible no later
    // than seq; pairs with the target's acquire load of seq.
    f->seq.store(o.k + 1, std::memory_order_release);
    ++o.k;
    o.filling = false;
    lanes_[t].cur = lanes_[t].end = nullptr;
    wake_if_waiting(&rings_[t].bell->waiting, &rings_[t].bell->seq);
  }

  bool has_credit(uint32_t t) {
    Out& o = out_[t];
    if (o.k < o.limit) return true;
    // Acquire: pairs with the target's release store of consumed, so its
    // reads of the segments it released happen before we overwrite them.
    o.limit = rings_[t].ring.header->consumed.load(std::memory_order_acquire) + ctx_->ring_segments;
    return o.k < o.limit;
  }

  Status acquire(uint32_t t, Deadline deadline, bool try_only) {
    if (has_credit(t)) [[likely]] return Status::kOk;
    if (try_only) return Status::kBackPressured;
    return wait_for_credit(t, deadline);
  }

  Status wait_for_credit(uint32_t t, Deadline deadline) {
    auto* hdr = rings_[t].ring.header;
    const uint32_t target_rank = ctx_->spec.targets[t].rank;
    if (deadline != kForever && Clock::now() >= deadline) return fail(Status::kTimeout, "no credit");
    for (uint32_t i = 0;; ++i) {
      if (has_credit(t)) return Status::kOk;
      if (i < ctx_->spin_iterations) {
        cpu_relax();
        continue;
      }
      if (Clock::now() >= deadline) {
        return fail(Status::kTimeout, ctx_->endpoint_name(true, index_) + ": deadline passed waiting for credit from " +
                                          ctx_->peer_name(false, t) + host_of(ctx_, target_rank) +
                                          " (its ring is full: the target is not consuming)");
      }
      if (i < ctx_->spin_iterations + kYieldRounds) {
        sched_yield();
        continue;
      }
      if (std::string why = lost_reason(ctx_, target_rank); !why.empty()) {
        return fail(Status::kPeerLost, ctx_->endpoint_name(true, index_) + ": cannot deliver to " +
                                           ctx_->peer_name(false, t) + ": " + why);
      }
      hdr->source_waiting.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = hdr->credit_seq.load(std::memory_order_relaxed);
      if (!has_credit(t)) futex_wait(&hdr->credit_seq, seen, until(deadline));
      hdr->source_waiting.store(0, std::memory_order_relaxed);
    }
  }

  const FlowContext* ctx_;
  uint32_t index_;
  std::vector<OutRingRef> rings_;
  std::vector<Out> out_;
  std::vector<Lane> lane_store_;
  bool closed_ = false;
  std::string error_;
};

class ShmTarget final : public TargetCore {
 public:
  ShmTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell, std::vector<InRingRef> rings)
      : ctx_(ctx), index_(index), bell_(bell), in_(rings.size()) {
    SLUICE_CHECK(rings.size() == ctx->spec.sources.size());
    for (size_t s = 0; s < rings.size(); ++s) in_[s].ring = rings[s].ring;
    credit_batch_ = std::max<uint32_t>(1, ctx->ring_segments / 2);
  }

  ~ShmTarget() override {
    // Hand back whatever we hold so that sources blocked on us can finish.
    release_held();
    for (auto& in : in_) publish_credit(in);
  }

  Status next(Deadline deadline, SegmentView* out) override {
    release_held();
    if (Status s = scan(out); s != Status::kTimeout) return s;
    if (ended_ == in_.size()) return Status::kEndOfFlow;
    return wait(deadline, out);
  }

  const std::string& error() const override { return error_; }

 private:
  struct In {
    RingView ring;
    uint64_t k = 0;          // next segment to read
    uint64_t released = 0;   // segments finished with
    uint64_t published = 0;  // `released` as last published to the source
    bool ended = false;
  };

  Status fail(Status s, std::string message) {
    error_ = std::move(message);
    return s;
  }

  void publish_credit(In& in) {
    if (in.published == in.released) return;
    // Release: our reads of the released segments happen before the source,
    // after its acquire load of consumed, overwrites them.
    in.ring.header->consumed.store(in.released, std::memory_order_release);
    in.published = in.released;
    wake_if_waiting(&in.ring.header->source_waiting, &in.ring.header->credit_seq);
  }

  void release(In& in) {
    ++in.released;
    if (in.released - in.published >= credit_batch_) publish_credit(in);
  }

  void release_held() {
    if (held_ < 0) return;
    release(in_[static_cast<size_t>(held_)]);
    held_ = -1;
  }

  // One pass over the rings, starting after the last one served (fairness).
  // kOk with *out set, kTimeout if nothing is ready, or an error.
  Status scan(SegmentView* out) {
    const auto n = static_cast<uint32_t>(in_.size());
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t s = next_ + i;
      if (s >= n) s -= n;
      In& in = in_[s];
      if (in.ended) continue;
      Footer* f = in.ring.footer(in.k);
      // Acquire: pairs with the source's release store of seq; the payload,
      // bytes_used and flags are complete once we see k + 1.
      if (f->seq.load(std::memory_order_acquire) != in.k + 1) continue;
      const uint32_t used = f->bytes_used;
      const uint32_t flags = f->flags;
      const std::byte* data = in.ring.payload(in.k);
      if (Status st = check_segment(s, in.k, used, flags, data); st != Status::kOk) return st;
      ++in.k;
      if (flags & layout::kEnd) {
        in.ended = true;
        ++ended_;
      }
      if (used == 0) {
        release(in);
        if (in.ended) publish_credit(in);
        continue;
      }
      held_ = static_cast<int>(s);
      next_ = s + 1 == n ? 0 : s + 1;
      *out = SegmentView{data, used, s};
      return Status::kOk;
    }
    return Status::kTimeout;
  }

  // Checks a footer and payload written by another process before anything
  // is handed to the user: a corrupt segment must never cause an overrun.
  Status check_segment(uint32_t s, uint64_t k, uint32_t used, uint32_t flags, const std::byte* data) {
    const FlowSpec& spec = ctx_->spec;
    const char* problem = nullptr;
    if (!(flags & layout::kConsumable)) problem = "flags lack CONSUMABLE";
    else if (used > ctx_->payload_bytes) problem = "bytes_used exceeds the segment payload";
    else if (spec.record_size != 0 && used % spec.record_size != 0) problem = "bytes_used is not a whole number of records";
    else if (spec.record_size == 0 && !validate_records(data, used)) problem = "a record length overruns the segment";
    if (problem == nullptr) return Status::kOk;
    return fail(Status::kPeerLost, ctx_->endpoint_name(false, index_) + ": segment " + std::to_string(k) + " from " +
                                       ctx_->peer_name(true, s) + " is corrupt (" + problem + ", bytes_used " +
                                       std::to_string(used) + "); the flow cannot continue");
  }

  // Nothing was ready: spin, then yield, then park on the doorbell, until a
  // segment arrives, every source ended, the deadline passes or a source is
  // lost.
  Status wait(Deadline deadline, SegmentView* out) {
    // Credit we were lazy about would now only stall the sources (and a
    // caller polling with try_consume would never hand it back).
    for (auto& in : in_) publish_credit(in);
    if (deadline != kForever && Clock::now() >= deadline) return fail(Status::kTimeout, "nothing ready");
    for (uint32_t i = 0;; ++i) {
      if (Status s = scan(out); s != Status::kTimeout) return s;
      if (ended_ == in_.size()) return Status::kEndOfFlow;
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
      if (in.ring.header->source_aborted.load(std::memory_order_acquire) != 0 &&
          in.ring.footer(in.k)->seq.load(std::memory_order_acquire) != in.k + 1) {
        return fail(Status::kPeerLost, ctx_->endpoint_name(false, index_) + ": " + ctx_->peer_name(true, s) +
                                           " was destroyed without close(); the flow is incomplete");
      }
      const uint32_t rank = ctx_->spec.sources[s].rank;
      if (std::string why = lost_reason(ctx_, rank); !why.empty()) {
        if (in.ring.footer(in.k)->seq.load(std::memory_order_acquire) == in.k + 1) continue;  // drain first
        return fail(Status::kPeerLost, ctx_->endpoint_name(false, index_) + ": lost " +
                                           ctx_->peer_name(true, s) + " before it closed: " + why);
      }
    }
    return Status::kOk;
  }

  std::string describe_wait(const char* what) const {
    std::string ranks;
    std::vector<uint32_t> seen;
    for (uint32_t s = 0; s < in_.size(); ++s) {
      if (in_[s].ended) continue;
      const uint32_t r = ctx_->spec.sources[s].rank;
      bool dup = false;
      for (uint32_t x : seen) dup |= x == r;
      if (dup) continue;
      seen.push_back(r);
      if (!ranks.empty()) ranks += ", ";
      ranks += std::to_string(r) + host_of(ctx_, r);
    }
    return ctx_->endpoint_name(false, index_) + ": " + what + " waiting for sources on rank(s) " + ranks +
           " that have not closed";
  }

  const FlowContext* ctx_;
  uint32_t index_;
  layout::Doorbell* bell_;
  std::vector<In> in_;
  uint32_t credit_batch_ = 1;
  uint32_t next_ = 0;
  uint32_t ended_ = 0;
  int held_ = -1;
  std::string error_;
};

}  // namespace

std::string FlowContext::endpoint_name(bool source, uint32_t index) const {
  return "flow '" + spec.name + "' " + peer_name(source, index);
}

std::string FlowContext::peer_name(bool source, uint32_t index) const {
  const Endpoint& e = source ? spec.sources[index] : spec.targets[index];
  return std::string(source ? "source" : "target") + " (" + std::to_string(e.rank) + "," + std::to_string(e.slot) + ")";
}

std::unique_ptr<SourceCore> make_shm_source(const FlowContext* ctx, uint32_t source_index,
                                            std::vector<OutRingRef> rings) {
  return std::make_unique<ShmSource>(ctx, source_index, std::move(rings));
}

std::unique_ptr<TargetCore> make_shm_target(const FlowContext* ctx, uint32_t target_index, layout::Doorbell* bell,
                                            std::vector<InRingRef> rings) {
  return std::make_unique<ShmTarget>(ctx, target_index, bell, std::move(rings));
}

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
