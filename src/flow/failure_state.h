// What a source or target knows about failure: its last error's text,
// whether it failed for good, and the first peer it lost; and how a peer's
// loss is put into words.
//
// Thread safety: owned by the core's thread, like the core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flow/flow_core.h"
#include "observe/endpoint_counters.h"
#include "wire/layout.h"

namespace sluice::detail {

// Why `rank` can no longer be waited for, or empty if it is still alive.
std::string lost_reason(const FlowContext* ctx, uint32_t rank);
// " on <host>" for messages about `rank`, or empty if its host is unknown.
std::string host_of(const FlowContext* ctx, uint32_t rank);
// The first rank of the flow (its sources', then its targets') that this
// process knows is lost, else the first one another process's abort named
// lately (Liveness::heard_lost), or layout::kNoCause.
uint32_t first_lost_rank(const FlowContext* ctx);

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
  // As above, about the peer on `rank` (kNoRank: none in particular). The
  // first failure is the one reported (a later one is mostly its echo).
  Status fail_for_good(std::string message, uint32_t rank = kNoRank) {
    if (failed_ != Status::kOk) return failed_;
    note_lost(rank);
    failed_ = Status::kPeerLost;
    if (stats_ != nullptr) counters::set_state(stats_, counters::State::kFailed, message);
    return fail(Status::kPeerLost, std::move(message));
  }
  // The first rank lost, for lost_peer().
  void note_lost(uint32_t rank) {
    if (lost_rank_ == kNoRank) lost_rank_ = rank;
  }
  // Why this end aborts, for the peers' abort words (layout::abort_word):
  // the rank it lost, else the first rank of the flow its process knows
  // lost (its thread mostly fails, and drops it, because one was).
  uint32_t abort_cause(const FlowContext* ctx) const {
    return lost_rank_ != kNoRank ? lost_rank_ : first_lost_rank(ctx);
  }
  std::optional<LostPeer> lost_peer(const FlowContext* ctx) const {
    if (lost_rank_ == kNoRank) return std::nullopt;
    LostPeer p{lost_rank_, {}};
    if (lost_rank_ < ctx->hosts.size()) p.host = ctx->hosts[lost_rank_];
    return p;
  }
  Status failed_ = Status::kOk;
  std::string error_;
  // This endpoint's counters (observe/endpoint_counters.h), set by the core's
  // constructor and released by its destructor.
  counters::Slot* stats_ = nullptr;
  uint32_t lost_rank_ = kNoRank;
};

}  // namespace sluice::detail
