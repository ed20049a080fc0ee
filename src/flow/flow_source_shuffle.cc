// ShuffleSource: each record goes to the one target it is routed to, so
// every target's segment fills, publishes and claims on its own, and a lost
// target fails the source (what was routed to it cannot be delivered).
#include <bit>
#include <cstddef>

#include "common/log.h"
#include "flow/flow_source.h"

namespace sluice::detail {

// The inline Latency path (flow_cores.h) writes and reads layout.h's footer.
static_assert(offsetof(layout::Footer, bytes_used) == 0 && offsetof(layout::Footer, flags) == 4 &&
              offsetof(layout::Footer, seq) == kFastFooterSeqOffset);
static_assert(layout::kConsumable == kFastConsumable);
static_assert(layout::kTailEmpty == kFastTailEmpty);
static_assert(!tail_published(layout::kLine - layout::kFooterBytes) &&
                  tail_published(layout::kLine),
              "tails publish exactly the records too large to share a line with the footer");
static_assert(std::endian::native == std::endian::little,
              "the fast path packs the footer's first word");

ShuffleSource::ShuffleSource(const FlowContext* ctx, uint32_t index, std::vector<OutRingRef> rings,
                             std::unique_ptr<OfiSource> ofi)
    : FlowSource(ctx, index, std::move(rings), std::move(ofi)) {
  // The inline Latency push (flow_cores.h) covers the local rings of a flow
  // with one record size: each of its segments is one record, footer only.
  const uint32_t S = ctx->ring_segments;
  if (!latency_fast_path(*ctx)) return;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    const OutRingRef& r = rings_[t];
    if (r.remote) continue;
    Out& o = out_[t];
    o.fast = r.ring.segments;
    o.target_waiting = &r.bell->waiting;
    o.slot_mask = S - 1;
    o.stride = r.ring.segment_stride;
    o.footer = r.ring.payload_bytes();
    fast_open_ = true;
  }
}

// Counts what the inline push published towards target t since last time.
void ShuffleSource::count_fast(uint32_t t) {
  Out& o = out_[t];
  if (o.fast_published == 0) return;
  counters::add(stats_->segments, o.fast_published);
  counters::add(stats_->bytes, o.fast_published * ctx_->spec.record_size());
  o.fast_published = 0;
}

ShuffleSource::~ShuffleSource() { retire(); }

Status ShuffleSource::reserve(uint32_t t, size_t bytes, Deadline deadline, bool try_only) {
  if (Status s = admit(bytes); s != Status::kOk) return s;
  Out& o = out_[t];
  count_fast(t);
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

Status ShuffleSource::publish(uint32_t t, Deadline deadline, bool try_only) {
  // Latency mode: the record must go now (its peer may be waiting for it
  // to answer).
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

Status ShuffleSource::flush(Deadline deadline) {
  if (failed_ != Status::kOk) return failed_;
  if (closed_) return Status::kOk;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    Out& o = out_[t];
    count_fast(t);
    if (o.filling && used_bytes(t) != 0) {
      if (Status s = publish_segment(t, used_bytes(t), 0, deadline); s != Status::kOk) return s;
    }
    if (rings_[t].remote && o.posted < o.k) {
      if (Status s = post_pending(t, deadline, false); s != Status::kOk) return s;
    }
  }
  return Status::kOk;
}

Status ShuffleSource::close(Deadline deadline) {
  if (failed_ != Status::kOk) return failed_;
  if (closed_) return Status::kOk;
  counters::set_state(stats_, counters::State::kClosing);
  Status first = Status::kOk;
  fast_open_ = false;  // what is left goes through the slow path
  for (uint32_t t = 0; t < num_targets_; ++t) {
    Out& o = out_[t];
    count_fast(t);
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
  if (Status s = post_all_pending(deadline); s != Status::kOk) return s;
  if (Status s = finish_close(deadline); s != Status::kOk) return s;
  if (log::level() >= log::Level::kDebug) {
    for (uint32_t t = 0; t < num_targets_; ++t) {
      log::debug(ctx_->endpoint_name(true, index_), ": closed towards ", ctx_->peer_name(false, t),
                 " after ", out_[t].k, " segments (", out_[t].posted, " handed to the provider)");
    }
  }
  // A target destroyed before our END never consumed everything: the
  // flow did not deliver what it promised. (Only the target's own word
  // counts here: a target rank that consumed our END may well have left.)
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (target_aborted(t)) return lost_target(t, target_destroyed_reason(t));
  }
  return Status::kOk;
}

}  // namespace sluice::detail
