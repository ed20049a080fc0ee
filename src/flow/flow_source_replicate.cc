// FlowSource, replicate flows: every record goes to every target, so the
// lanes fill, publish and claim segments in lockstep (numbered by the
// sequencer when the flow is ordered), and a lost target leaves the fan-out
// while the source goes on for the others.
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "flow/flow_source.h"

namespace sluice::detail {

// Replicate flows: a lost target leaves the fan-out and the source goes on
// for the others (close() then reports it). True if `t` was dropped.
// After a transport error (`broken`) the registry usually confirms the
// peer's death within moments: wait for it a little.
bool FlowSource::drop_if_lost(uint32_t t, bool broken) {
  if (!replicate_ || out_[t].dropped) return out_[t].dropped;
  std::string why = target_lost(t);
  for (const auto give_up = Clock::now() + kLossConfirmation;
       broken && why.empty() && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ofi_ != nullptr) (void)progress();
    why = target_lost(t);
  }
  if (why.empty()) return false;
  note_lost(ctx_->spec.targets[t].rank);
  out_[t].dropped = true;
  if (ofi_ != nullptr) {
    for (uint32_t j = 0; j < ctx_->ring_segments && rings_[t].remote; ++j)
      ops_[t * ctx_->ring_segments + j].busy = false;
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
Status FlowSource::acquire_live(uint32_t t, Deadline deadline, bool try_only) {
  if (!live(t)) return Status::kOk;
  Status s = acquire(t, deadline, try_only);
  if (s == Status::kPeerLost && drop_if_lost(t)) return failed_;
  return s;
}

// Replicate flows: every lane fills in lockstep, so they publish and claim
// segments together: a segment is published on every target's ring (with
// one sequence number when ordered), then the next is claimed on all once
// every target has credit. Each step may be retried after kWouldBlock
// or kTimeout without losing lockstep.
Status FlowSource::reserve_all(Deadline deadline, bool try_only) {
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
Status FlowSource::publish_all(uint32_t used, uint32_t flags, Deadline deadline, bool try_only) {
  if (sequencer_ != nullptr) {
    uint64_t number = kNoSequence;
    if (used > prefix_) {
      std::string why;
      if (sequencer_->take(&number, &why) != Status::kOk) {
        return fail_for_good(ctx_->endpoint_name(true, index_) +
                             ": cannot take a sequence number: " + why);
      }
      if (die_after_sequence_ != 0 && ++sequences_taken_ == die_after_sequence_) [[unlikely]] {
        log::warn(ctx_->endpoint_name(true, index_),
                  ": test hook: dying after taking sequence number ", number);
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
    Status s =
        numbered ? post_pending(t, kForever, false) : post_if_due(t, flags, deadline, try_only);
    if (first == Status::kOk) first = s;
  }
  return first;
}

Status FlowSource::close_all(Deadline deadline) {
  const uint32_t f0 = rep();
  if (!out_[f0].ended) {
    if (!out_[f0].filling) {
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (Status s = acquire_live(t, deadline, deadline == Deadline::min()); s != Status::kOk)
          return s;
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
                                       ": closed; every other target got every record, but lost " +
                                       dropped_);
  }
  return Status::kOk;
}

}  // namespace sluice::detail
