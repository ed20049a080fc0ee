#include "flow/parking.h"

#include <algorithm>

namespace sluice::detail {

std::chrono::nanoseconds until(Deadline deadline, std::chrono::nanoseconds slice) {
  if (deadline == kForever) return slice;
  auto left = deadline - Clock::now();
  return std::min<std::chrono::nanoseconds>(left, slice);
}

std::chrono::milliseconds until_ms(Deadline deadline, std::chrono::milliseconds slice) {
  auto ns = until(deadline, slice);
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(ns));
}

}  // namespace sluice::detail
