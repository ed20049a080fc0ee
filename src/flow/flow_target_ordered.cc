// OrderedTarget, ordered replicate flows: hands segments out in the order
// of the sequence numbers their sources took, reports a number that never
// arrives as a gap, and goes on without a lost source.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "flow/flow_target.h"

namespace sluice::detail {

OrderedTarget::OrderedTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
                             std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi,
                             std::unique_ptr<Sequencer> sequencer)
    : FlowTarget(ctx, index, bell, std::move(rings), std::move(ofi)),
      gap_timeout_(std::chrono::milliseconds(ctx->spec.effective_gap_timeout_ms())),
      skipped_when_full_(ctx->spec.skip_full_ms() != 0),
      sequencer_(std::move(sequencer)) {}

OrderedTarget::~OrderedTarget() { retire(); }

// Every ring's head is its lowest number, so only heads are looked at.
Status OrderedTarget::scan(SegmentView* out) {
  const auto n = static_cast<uint32_t>(in_.size());
  for (;;) {
    bool moved = false;
    ahead_of_ = kNoneAhead;
    rings_ahead_ = 0;
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
        ahead_of_ = std::min(ahead_of_, number);
        ++rings_ahead_;
        continue;
      }
      advance(s, in, h.flags, h.used);
      if (!records || number < expected_) {
        if (records) {
          ++late_;
          log::warn(ctx_->endpoint_name(false, index_), ": dropped sequence number ", number,
                    " from ", ctx_->peer_name(true, s),
                    ": it arrived after it was reported as a gap");
        }
        skip(in, h.slot);
        moved = true;
        continue;
      }
      ++expected_;
      gap_since_ = Deadline::max();
      hold(s, h);
      *out = SegmentView{h.data, h.used, s, number};
      return Status::kOk;
    }
    if (!moved) return known_gap() ? report_gap(true) : Status::kTimeout;
  }
}

// Every open ring's head is past the number expected: no open source holds
// it (its numbers grow along its ring), so a lost source took it, or a
// source skipped this target (skip_full_targets_after) when it sent it.
// Found by scan, so a run of such numbers goes a gap per call: a Worker
// polling the target (try_consume) neither parks nor waits for the liveness
// check between them.
bool OrderedTarget::known_gap() const {
  return (!lost_.empty() || skipped_when_full_) && rings_ahead_ != 0 &&
         rings_ahead_ == in_.size() - ended_;
}

// An ordered flow goes on without a lost source: what it published is
// delivered, what it took and never published becomes a gap.
bool OrderedTarget::go_on_without(uint32_t s, std::string_view why) {
  lose(s, why);
  return true;
}

Status OrderedTarget::check_stalled() {
  if (ended_ == in_.size()) return end_of_flow();
  return check_gap();
}

Status OrderedTarget::check_gap() {
  const auto now = Clock::now();
  if (known_gap()) return report_gap(true);  // (a source lost just now)
  bool taken = ahead_of_ != kNoneAhead;
  if (!taken && !lost_.empty() && now >= next_peek_) {
    next_peek_ = now + gap_timeout_ / 4;
    // A sequencer that cannot be read (its owner finished first) says
    // nothing; a later ring head still can.
    uint64_t count = 0;
    std::string why;
    taken = sequencer_->taken(&count, &why) == Status::kOk && count > expected_;
    peek_taken_ = taken;
    peek_count_ = taken ? count : 0;
  } else if (!taken) {
    taken = peek_taken_;
  }
  if (!taken) {
    gap_since_ = Deadline::max();
    return Status::kTimeout;
  }
  if (gap_since_ == Deadline::max()) {
    gap_since_ = now;
    // Numbers are taken in order: a later one in a ring means every number
    // below it was taken too.
    stall_known_ = std::max(ahead_of_ != kNoneAhead ? ahead_of_ : 0, peek_taken_ ? peek_count_ : 0);
  }
  if (now - gap_since_ < gap_timeout_) return Status::kTimeout;
  return report_gap();
}

Status OrderedTarget::report_gap(bool known_lost) {
  gap_ = expected_++;
  // The next number may be a gap already (known taken, or every open ring
  // past it): the next poll looks at once.
  check_stall_on_next_poll();
  // The next number goes on in the same stall if it was known taken when
  // the stall began (see check_gap); otherwise its own begins.
  if (expected_ >= stall_known_) gap_since_ = Deadline::max();
  peek_taken_ = false;
  next_peek_ = Clock::now();
  std::string why;
  if (known_lost && lost_.empty()) {
    why = ": every open source is past it (its source skipped this target while its ring was full)";
  } else if (known_lost) {
    why = ": a lost source took it (every open source is past it)";
  } else if (skipped_when_full_ && ended_ == in_.size()) {
    why = ": every source ended past it (its source skipped this target while its ring was full)";
  } else {
    why = " within " + std::to_string(gap_timeout_.count()) + " ms (its source may have died " +
          (skipped_when_full_ ? "after taking it, or skipped this target while its ring was full)"
                              : "after taking it)");
  }
  return fail(Status::kGap, ctx_->endpoint_name(false, index_) + ": sequence number " +
                                std::to_string(gap_) + " never arrived" + why + lost_);
}

Status OrderedTarget::end_of_flow() {
  // (A flow that skips full targets may have skipped this one: what its
  // sources took and it never got are gaps, found from the sequencer.)
  if (lost_.empty() && !skipped_when_full_) return Status::kEndOfFlow;
  uint64_t count = 0;
  std::string why;
  if (sequencer_->taken(&count, &why) == Status::kOk && count > expected_) return report_gap();
  if (lost_.empty()) return Status::kEndOfFlow;
  return fail(Status::kPeerLost,
              ctx_->endpoint_name(false, index_) + ": ended without" + lost_.substr(1) +
                  (why.empty() ? "" : "; the sequencer could not be read: " + why));
}

}  // namespace sluice::detail
