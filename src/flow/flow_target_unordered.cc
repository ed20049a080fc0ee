// UnorderedTarget, shuffle and unordered replicate flows: hands segments
// out in turn across the rings, as they arrive.
#include "flow/flow_target.h"

namespace sluice::detail {

UnorderedTarget::UnorderedTarget(const FlowContext* ctx, uint32_t index, layout::Doorbell* bell,
                                 std::vector<InRingRef> rings, std::unique_ptr<OfiTarget> ofi)
    : FlowTarget(ctx, index, bell, std::move(rings), std::move(ofi)) {}

UnorderedTarget::~UnorderedTarget() { retire(); }

// One pass over the rings, starting after the last one served (fairness).
Status UnorderedTarget::scan(SegmentView* out) {
  const auto n = static_cast<uint32_t>(in_.size());
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t s = turn_ + i;
    if (s >= n) s -= n;
    Head h;
    if (Status st = head(s, &h); st != Status::kOk) {
      if (st == Status::kTimeout) continue;
      return st;
    }
    In& in = in_[s];
    advance(s, in, h.flags, h.used);
    if (h.used == 0) {
      skip(in, h.slot);
      continue;
    }
    hold(s, h);
    turn_ = s + 1 == n ? 0 : s + 1;
    *out = SegmentView{h.data, h.used, s};
    return Status::kOk;
  }
  return Status::kTimeout;
}

}  // namespace sluice::detail
