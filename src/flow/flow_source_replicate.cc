// ReplicateSource: every record goes to every target, so the lanes fill,
// publish and claim segments in lockstep (numbered by the sequencer when the
// flow is ordered), and a lost target leaves the fan-out while the source
// goes on for the others.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/check.h"
#include "common/log.h"
#include "common/test_hooks.h"
#include "flow/flow_source.h"

namespace sluice::detail {

ReplicateSource::ReplicateSource(const FlowContext* ctx, uint32_t index,
                                 std::vector<OutRingRef> rings, std::unique_ptr<OfiSource> ofi,
                                 std::unique_ptr<Sequencer> sequencer)
    : FlowSource(ctx, index, std::move(rings), std::move(ofi)), sequencer_(std::move(sequencer)) {
  SLUICE_CHECK((sequencer_ != nullptr) == ctx->spec.ordered());
  // One lane per shm target (records go straight into its ring), and one
  // staging lane shared by every ofi target: each segment is written once
  // and moved to each of them from the same staging slot.
  replicate_ = true;
  skip_after_ = std::chrono::milliseconds(ctx->spec.skip_full_ms());
  skipped_.assign(num_targets_, 0);
  full_since_.assign(num_targets_, kForever);
  missed_.assign(num_targets_, 0);
  // A flow that may skip a full target gives every ofi target a staging
  // lane of its own (one more copy of each record per target): a target's
  // ring slots then follow its own segments, not the shared lane's.
  const bool share_staging = skip_after_ == Clock::duration::zero();
  int64_t lead = -1;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (rings_[t].remote && lead >= 0 && share_staging) {
      lane_of_[t] = static_cast<uint32_t>(lead);
      rings_[t].ring = rings_[lead].ring;
      continue;
    }
    if (rings_[t].remote) lead = t;
    fan_store_.push_back(t);
  }
  fan_ = fan_store_.data();
  num_fan_ = static_cast<uint32_t>(fan_store_.size());
  die_after_sequence_ = test_hooks::die_after_sequence();
  // Ordered, Bandwidth mode, every target remote: a run of full segments
  // waits in the staging ring and takes its numbers with one fetch-and-add
  // when it is handed over (number_pending), not one remote round trip per
  // segment. Numbers are taken only for segments already published, so an
  // idle or closing source leaves no hole. An shm target reads a segment
  // the moment it is published: with one, each segment is numbered then.
  bool all_remote = has_ofi();
  for (uint32_t t = 0; t < num_targets_; ++t) all_remote &= rings_[t].remote;
  if (sequencer_ != nullptr && all_remote && !latency_ && share_staging) {
    numbers_on_post_ = true;
    // Half the ring: the other half fills while a run's numbers are fetched
    // and its writes go. Shorter runs (one coalesced write each) measured
    // slower: the fetch-and-add, not the overlap, is what costs.
    post_batch_ = std::max(post_batch_, std::max(1u, ctx->ring_segments / 2));
  }
  // While a fetch-and-add is out (tens of microseconds over tcp), the runs
  // already handed over keep moving: with manual progress the provider
  // writes to its sockets only while our queue is read. A failure found
  // there is kept (failed_) and reported by the call that numbers.
  if (sequencer_ != nullptr && has_ofi()) {
    sequencer_->set_while_waiting(
        [](void* self) { (void)static_cast<ReplicateSource*>(self)->progress(); }, this);
  }
}

ReplicateSource::~ReplicateSource() { retire(); }

Status ReplicateSource::reserve(uint32_t, size_t bytes, Deadline deadline, bool try_only) {
  if (Status s = admit(bytes); s != Status::kOk) return s;
  return reserve_all(deadline, try_only);
}

Status ReplicateSource::publish(uint32_t, Deadline deadline, bool try_only) {
  // Latency mode: the record must go now (its peer may be waiting for it
  // to answer). It is in every live target's ring or staging slot: it is
  // taken. What the provider could not accept yet goes with the next call.
  const Status s = publish_all(used_bytes(rep()), 0, deadline, try_only);
  return s == Status::kWouldBlock || s == Status::kTimeout ? Status::kOk : s;
}

Status ReplicateSource::flush(Deadline deadline) {
  if (failed_ != Status::kOk) return failed_;
  if (closed_) return Status::kOk;
  if (out_[rep()].filling && used_bytes(rep()) > prefix_) {
    if (Status s = publish_all(used_bytes(rep()), 0, deadline, false); s != Status::kOk) return s;
  }
  return post_all_pending(deadline);
}

// The END rides on the last segment in every lane at once. Once published
// (marked) it is never published again: a retry after kWouldBlock or
// kTimeout only hands over what is pending.
Status ReplicateSource::close(Deadline deadline) {
  if (failed_ != Status::kOk) return failed_;
  if (closed_) return Status::kOk;
  counters::set_state(stats_, counters::State::kClosing);
  const uint32_t f0 = rep();
  if (!out_[f0].ended) {
    bool skipping = false;
    for (uint32_t t = 0; t < num_targets_; ++t) skipping |= live(t) && skipped_[t] != 0;
    if (skipping && out_[f0].filling) {
      // The segment being filled misses a target: it goes as it is, and
      // the END on a segment of its own, which every target gets.
      if (Status s = publish_all(used_bytes(f0), 0, deadline, false); s != Status::kOk) return s;
    }
    if (!out_[rep()].filling) {
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (Status s = acquire_live(t, deadline, deadline == Deadline::min()); s != Status::kOk)
          return s;
      }
      for (uint32_t t = 0; t < num_targets_; ++t) {
        if (!live(t)) continue;
        skipped_[t] = 0;
        full_since_[t] = kForever;
        start_segment(t);
      }
      if (skipping) refan();
    }
    Status s = publish_all(used_bytes(rep()), layout::kEnd, deadline, false);
    for (auto& o : out_) o.ended = true;
    if (s != Status::kOk) return s;
  }
  if (Status s = post_all_pending(deadline); s != Status::kOk) return s;
  if (Status s = finish_close(deadline); s != Status::kOk) return s;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (live(t) && target_aborted(t)) (void)drop_if_lost(t, false);
  }
  if (failed_ != Status::kOk) return failed_;
  if (!dropped_.empty()) {
    return fail(Status::kPeerLost, ctx_->endpoint_name(true, index_) +
                                       ": closed; every other target got every record, but lost " +
                                       dropped_);
  }
  return Status::kOk;
}

// A lost target leaves the fan-out and the source goes on for the others
// (close() then reports it). True if `t` was dropped. After a transport
// error (`broken`) the registry usually confirms the peer's death within
// moments: wait for it a little.
bool ReplicateSource::drop_if_lost(uint32_t t, bool broken) {
  if (out_[t].dropped) return true;
  std::string why = target_lost(t);
  for (const auto give_up = Clock::now() + kLossConfirmation;
       broken && why.empty() && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (has_ofi()) (void)progress();
    why = target_lost(t);
  }
  if (why.empty()) return false;
  // A target that aborted after its rank lost another: that one is the peer
  // lost (as FlowSource::lost_target says for a shuffle source).
  const uint32_t cause = layout::abort_cause(target_aborted(t));
  if (cause != layout::kNoCause && ctx_->liveness != nullptr) ctx_->liveness->hear_lost(cause);
  note_lost(cause != layout::kNoCause ? cause : ctx_->spec.targets()[t].rank);
  out_[t].dropped = true;
  forget_transfers(t);
  bool lane_used = false, any_live = false, any_in = false;
  for (uint32_t u = 0; u < num_targets_; ++u) {
    lane_used |= live(u) && lane_of_[u] == lane_of_[t];
    any_live |= live(u);
    any_in |= in_segment(u);
  }
  if (skip_after_ != Clock::duration::zero()) {
    // (Every lane its own. With no target left in the segment, the next
    // push claims one anew, for every live target.)
    if (!any_in) std::fill(skipped_.begin(), skipped_.end(), 0);
    refan();
  } else if (!lane_used) {
    std::erase(fan_store_, lane_of_[t]);
    num_fan_ = static_cast<uint32_t>(fan_store_.size());
  }
  std::string who = ctx_->peer_name(false, t);
  who.append(" (").append(why).append(")");
  dropped_.append(dropped_.empty() ? "" : ", ").append(who);
  log::warn(ctx_->endpoint_name(true, index_), ": going on without ", who);
  if (!any_live) {
    fail_for_good(ctx_->endpoint_name(true, index_) + ": every target is lost: " + dropped_);
  }
  return true;
}

// acquire() for a target, which may be dropped instead.
Status ReplicateSource::acquire_live(uint32_t t, Deadline deadline, bool try_only) {
  if (!live(t)) return Status::kOk;
  Status s = acquire(t, deadline, try_only);
  if (s == Status::kPeerLost && drop_if_lost(t, false)) return failed_;
  return s;
}

Status ReplicateSource::reserve_all(Deadline deadline, bool try_only) {
  const uint32_t f0 = rep();
  if (out_[f0].filling) {
    const uint32_t used = used_bytes(f0);
    if (used == prefix_) return Status::kOk;  // an empty segment always fits one record
    if (Status s = publish_all(used, 0, deadline, try_only); s != Status::kOk) return s;
  }
  if (skip_after_ != Clock::duration::zero()) return claim_skipping(deadline, try_only);
  if (Status s = acquire_all(deadline, try_only); s != Status::kOk) return s;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (live(t)) start_segment(t);
  }
  return Status::kOk;
}

Status ReplicateSource::acquire_all(Deadline deadline, bool try_only) {
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (Status s = acquire_live(t, deadline, try_only); s != Status::kOk) return s;
  }
  return Status::kOk;
}

Status ReplicateSource::claim_skipping(Deadline deadline, bool try_only) {
  skip_wake_ = kForever;
  uint32_t with_room = 0;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!live(t)) continue;
    if (full_since_[t] == kForever && has_room(t)) {
      skipped_[t] = 0;
      ++with_room;
      continue;
    }
    const Deadline now = Clock::now();
    if (full_since_[t] == kForever) full_since_[t] = now;
    const Deadline limit = full_since_[t] + skip_after_;
    // (A target past the limit is asked only whether it has room again.)
    const bool past = now >= limit;
    const Status s =
        acquire_live(t, past ? Deadline::min() : std::min(deadline, limit), try_only || past);
    if (!live(t)) continue;  // lost and dropped meanwhile
    if (s == Status::kOk) {
      if (missed_[t] != 0) {
        log::info(ctx_->endpoint_name(true, index_), ": ", ctx_->peer_name(false, t),
                  " has room again after missing ", missed_[t], " segments");
      }
      full_since_[t] = kForever;
      missed_[t] = 0;
      skipped_[t] = 0;
      ++with_room;
      continue;
    }
    if (s != Status::kWouldBlock && s != Status::kTimeout) return s;
    if (!past && Clock::now() < limit) {
      skip_wake_ = limit;  // (a Worker parked on this source asks it again then)
      return s;            // the caller's deadline, or try_push
    }
    skipped_[t] = 1;
  }
  if (with_room == 0) {
    // No target has room: nothing goes, so nothing is skipped; wait for
    // all, as a flow that never skips does (with none live, there is
    // nothing to wait for, and the check below says so).
    if (Status s = acquire_all(deadline, try_only); s != Status::kOk) return s;
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (live(t)) {
        skipped_[t] = 0;
        full_since_[t] = kForever;
      }
    }
  }
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!in_segment(t)) continue;
    start_segment(t);
  }
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!live(t) || skipped_[t] == 0) continue;
    if (missed_[t]++ == 0) {
      log::warn(ctx_->endpoint_name(true, index_), ": ", ctx_->peer_name(false, t),
                " has had no room for ",
                std::chrono::duration_cast<std::chrono::milliseconds>(skip_after_).count(),
                " ms: it misses segments (it sees their numbers as gaps) until it has room");
    }
  }
  refan();
  if (num_fan_ == 0) return failed_ != Status::kOk ? failed_ : Status::kPeerLost;
  return Status::kOk;
}

void ReplicateSource::refan() {
  fan_store_.clear();
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (in_segment(t)) fan_store_.push_back(lane_of_[t]);
  }
  fan_ = fan_store_.data();
  num_fan_ = static_cast<uint32_t>(fan_store_.size());
}

// Publishes the segment being filled on every target (all hold `used`
// bytes), then hands the ofi ones to the provider.
Status ReplicateSource::publish_all(uint32_t used, uint32_t flags, Deadline deadline,
                                    bool try_only) {
  if (sequencer_ != nullptr && !numbers_on_post_) {
    uint64_t number = kNoSequence;
    if (used > prefix_) {
      if (Status s = take_numbers(1, &number); s != Status::kOk) return s;
    }
    for (uint32_t t = 0; t < num_targets_; ++t) {
      if (in_segment(t)) std::memcpy(out_[t].base, &number, sizeof(number));
    }
  }
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!in_segment(t)) continue;
    mark_published(t, used, flags);
    // As publish_segment counts: per segment and target.
    counters::add(stats_->segments, 1);
    counters::add(stats_->bytes, used - prefix_);
  }
  // A numbered batch is handed to every provider before we return, even
  // from try_push and past the deadline: every target waits for its number,
  // and one left unsent while this source idles would be declared a gap.
  // An ordered flow's segments without records (an END alone) go at once
  // as well.
  const bool ordered = sequencer_ != nullptr && !numbers_on_post_;
  const bool numbered = ordered && used > prefix_;
  Status first = Status::kOk;
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!rings_[t].remote || !in_segment(t)) continue;
    Status s = numbered  ? post_pending(t, kForever, false)
               : ordered ? post_pending(t, deadline, try_only)
                         : post_if_due(t, flags, deadline, try_only);
    if (first == Status::kOk) first = s;
  }
  return first;
}

// Takes `count` sequence numbers (the first in *first) with one
// fetch-and-add; a failure fails the source for good.
Status ReplicateSource::take_numbers(uint64_t count, uint64_t* first) {
  std::string why;
  const Status taken = sequencer_->take(count, first, &why);
  counters::op(stats_, 0,
               taken == Status::kOk        ? counters::Outcome::kDone
               : taken == Status::kTimeout ? counters::Outcome::kTimedOut
                                           : counters::Outcome::kFailed);
  if (taken != Status::kOk) {
    return fail_for_good(ctx_->endpoint_name(true, index_) +
                         ": cannot take a sequence number: " + why);
  }
  // The counters report numbers taken, not fetches.
  if (count > 1) counters::add(stats_->ops, count - 1);
  if (die_after_sequence_ != 0 && sequences_taken_ < die_after_sequence_ &&
      sequences_taken_ + count >= die_after_sequence_) [[unlikely]] {
    log::warn(ctx_->endpoint_name(true, index_), ": test hook: dying after taking sequence number ",
              *first + (die_after_sequence_ - sequences_taken_ - 1));
    std::_Exit(17);
  }
  sequences_taken_ += count;
  return Status::kOk;
}

// Every target is remote, so every lane is the one staging ring: a
// segment's number is written once, into its prefix there, before any
// target's transfer of it is posted. Segments without records (an END
// alone) take no number.
Status ReplicateSource::number_pending() {
  const uint32_t f0 = rep();
  const uint64_t end = out_[f0].k;
  if (numbered_ >= end) return Status::kOk;
  const layout::RingView& ring = rings_[f0].ring;
  uint64_t count = 0;
  for (uint64_t j = numbered_; j < end; ++j) count += ring.footer(j)->bytes_used > prefix_ ? 1 : 0;
  uint64_t next = kNoSequence;
  if (count > 0) {
    if (Status s = take_numbers(count, &next); s != Status::kOk) return s;
  }
  for (uint64_t j = numbered_; j < end; ++j) {
    const uint64_t number = ring.footer(j)->bytes_used > prefix_ ? next++ : kNoSequence;
    std::memcpy(ring.payload(j), &number, sizeof(number));
  }
  numbered_ = end;
  // The whole run goes to every target now, not only to the one whose post
  // numbered it: a source that then waits for credit from a slow target
  // must not hold back numbers the others were shown by other sources, or
  // they would declare them gaps. (post_pending numbers nothing more.)
  for (uint32_t t = 0; t < num_targets_; ++t) {
    if (!live(t) || out_[t].posted >= out_[t].k) continue;
    if (Status s = post_pending(t, kForever, false); s != Status::kOk) return s;
  }
  return Status::kOk;
}

}  // namespace sluice::detail
