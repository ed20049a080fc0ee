// FlowTarget, ordered replicate flows: hands segments out in the order of
// the sequence numbers their sources took, and reports a number that never
// arrives as a gap.
#include <cstring>

#include "common/log.h"
#include "flow/flow_target.h"

namespace sluice::detail {

// Ordered flows: hands out the segment carrying sequence number
// `expected_`, wherever it is. Every ring's head is its lowest number (a
// source takes numbers in increasing order), so only heads are looked at.
// Segments without records and ones that come after their number was
// declared a gap are released on the way.
Status FlowTarget::scan_ordered(SegmentView* out) {
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
Status FlowTarget::check_gap() {
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

Status FlowTarget::report_gap() {
  gap_ = expected_++;
  gap_since_ = Deadline::max();
  peek_taken_ = false;
  next_peek_ = Clock::now();
  return fail(Status::kGap, ctx_->endpoint_name(false, index_) + ": sequence number " +
                                std::to_string(gap_) + " never arrived within " +
                                std::to_string(gap_timeout_.count()) +
                                " ms (its source may have died after taking it)" + lost_);
}

// Every ring ended. If every source closed, each number taken was
// delivered (a source publishes what it numbers before it closes). If one
// was lost, numbers taken but never delivered are gaps, and then the flow
// ends incomplete.
Status FlowTarget::end_of_flow() {
  if (sequencer_ == nullptr || lost_.empty()) return Status::kEndOfFlow;
  uint64_t count = 0;
  std::string why;
  if (sequencer_->taken(&count, &why) == Status::kOk && count > expected_) return report_gap();
  return fail(Status::kPeerLost,
              ctx_->endpoint_name(false, index_) + ": ended without" + lost_.substr(1) +
                  (why.empty() ? "" : "; the sequencer could not be read: " + why));
}

}  // namespace sluice::detail
