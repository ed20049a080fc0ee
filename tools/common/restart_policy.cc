#include "restart_policy.h"

#include <algorithm>
#include <cmath>

#include "common/log.h"

namespace sluice::tool {

bool RestartPolicy::allows(uint32_t done, Clock::time_point now, std::string* why) {
  why->clear();
  if (done >= options_.restarts) return false;
  if (options_.rate_restarts == 0) return true;
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.rate_seconds));
  while (!recent_.empty() && now - recent_.front() >= window) recent_.pop_front();
  if (recent_.size() < options_.rate_restarts) return true;
  *why = log::cat(recent_.size(), " restarts within the last ", options_.rate_seconds,
                  " s already (--max-restart-rate ", options_.rate_restarts, "/",
                  options_.rate_seconds, ")");
  return false;
}

RestartPolicy::Clock::duration RestartPolicy::record(uint32_t nth, Clock::time_point now) {
  if (options_.rate_restarts != 0) recent_.push_back(now);
  if (options_.restart_delay_seconds <= 0) return Clock::duration::zero();
  const double doubled =
      options_.restart_delay_seconds * std::ldexp(1.0, static_cast<int>(std::min(nth, 64u)) - 1);
  const double seconds = std::min(doubled, options_.restart_delay_max_seconds);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace sluice::tool
