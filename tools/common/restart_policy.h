// sluice run's restart strategy (--restarts, --restart-delay,
// --restart-delay-max, --max-restart-rate): whether a failed rank is
// started again, and after how long. Flink's restart strategies are the
// model: a bound per rank, exponential backoff, and a failure rate over
// the whole job beyond which a failure ends it as without --restarts.
//
// Thread safety: the launcher's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

#include "run.h"

namespace sluice::tool {

class RestartPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RestartPolicy(const RunOptions& options) : options_(options) {}

  // Whether a rank already started again `done` times may be started again
  // at `now`. False with *why empty when its --restarts are used up (or
  // there are none), with *why set when the restart rate refuses it.
  bool allows(uint32_t done, Clock::time_point now, std::string* why);
  // Records the restart decided at `now`, the rank's `nth` (1 for its
  // first), and returns how long it waits before the new process starts.
  Clock::duration record(uint32_t nth, Clock::time_point now);

 private:
  const RunOptions& options_;
  std::deque<Clock::time_point> recent_;  // restarts within the rate's window
};

}  // namespace sluice::tool
