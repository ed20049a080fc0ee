// How a rank's sends treat a peer that takes nothing (flow_job.cc).
//
// A stopped process stays a member of the job until the registry's peer
// timeout, and its rings fill. It must not hold back the messages to the
// others: the election among the rest, the new leader's Accepts and the
// clients' requests to it go to a majority that answers. So a push that
// finds a full ring waits at most `wait()` (a quarter of the election
// timeout), then the message is dropped, as a network drops it, and that
// peer gets only what fits at once until a push to it goes again. The
// protocols make up for lost messages; the job's own messages (done,
// finish, finished) are said once and resent by no protocol, so one that a
// full ring refused is kept and sent again every `wait()` (and, as an epoch
// closes, waited for). An Accept whose replicate push timed out (kv-accept
// waits for every follower's credit) goes on kv-msg, one copy per follower,
// as do the epoch's later ones. A peer already quiet for `wait()` (nothing
// heard from it: a leader that the others just replaced, say) is not waited
// for at all when its ring is full: the wait would only pause the others.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "message.h"

namespace kv {

class SilentPeers {
 public:
  explicit SilentPeers(uint64_t election_timeout_ms)
      : wait_(std::max<uint64_t>(election_timeout_ms / 4, 1)) {}

  // A new epoch whose kv-msg targets are the ranks `live` (the first
  // `replicas` rank numbers are replicas; `self` is this rank): none stuck
  // or quiet, Accepts on kv-accept again.
  void new_epoch(const std::vector<uint32_t>& live, uint32_t replicas, uint32_t self,
                 uint64_t now_ms) {
    stuck_.assign(live.size(), 0);
    heard_ms_.assign(live.size(), now_ms);
    follower_.assign(live.size(), 0);
    for (size_t t = 0; t < live.size(); ++t) follower_[t] = live[t] < replicas && live[t] != self;
    accepts_on_msg_ = false;
  }
  // A message came from kv-msg target `t`'s rank.
  void heard(uint32_t t, uint64_t now_ms) { heard_ms_[t] = now_ms; }
  // Whether nothing came from target `t`'s rank for wait() or longer.
  bool quiet(uint32_t t, uint64_t now_ms) const {
    return now_ms - heard_ms_[t] >= static_cast<uint64_t>(wait_.count());
  }
  // Whether a replica other than this rank is quiet (kv-accept's targets).
  bool a_follower_quiet(uint64_t now_ms) const {
    for (uint32_t t = 0; t < follower_.size(); ++t)
      if (follower_[t] != 0 && quiet(t, now_ms)) return true;
    return false;
  }
  std::chrono::milliseconds wait() const { return wait_; }
  // Whether kv-msg target `t` refused a push lately: then a push to it does
  // not wait.
  bool stuck(uint32_t t) const { return stuck_[t] != 0; }
  static bool job_message(MsgType t) {
    return t == MsgType::kDone || t == MsgType::kFinish || t == MsgType::kFinished;
  }
  // A push to target `t` went.
  void sent(uint32_t t) { stuck_[t] = 0; }
  // A push of `m` to target `t` found its ring full past the wait (or at
  // once, while stuck): a job message is kept, any other dropped.
  void refused(uint32_t t, const Message& m, uint64_t now_ms) {
    stuck_[t] = 1;
    if (!job_message(m.type)) {
      ++dropped_;
      return;
    }
    if (unsent_.empty()) unsent_at_ = now_ms + static_cast<uint64_t>(wait_.count());
    unsent_.push_back(m);
  }
  // Appends the kept job messages to `out` once they are due (all of them
  // now when `all`, as an epoch closes).
  void take_due(Outbox& out, uint64_t now_ms, bool all) {
    if (unsent_.empty() || (!all && now_ms < unsent_at_)) return;
    for (Message& m : unsent_) out.push_back(std::move(m));
    unsent_.clear();
  }
  bool accepts_on_msg() const { return accepts_on_msg_; }
  void move_accepts_to_msg() { accepts_on_msg_ = true; }
  uint64_t dropped() const { return dropped_; }

 private:
  std::chrono::milliseconds wait_;
  std::vector<uint8_t> stuck_;      // per kv-msg target
  std::vector<uint64_t> heard_ms_;  // per kv-msg target: when a message last came
  std::vector<uint8_t> follower_;   // per kv-msg target: another replica
  bool accepts_on_msg_ = false;
  uint64_t dropped_ = 0;  // messages a full ring refused (said at the end)
  Outbox unsent_;         // job messages a full ring refused
  uint64_t unsent_at_ = 0;
};

}  // namespace kv
