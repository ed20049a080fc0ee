/// @file
/// sluice/deadline.h: the clock and deadline type every blocking call of sluice
/// takes.
///
/// A Deadline is an absolute point in time on the steady clock after which a
/// blocking call gives up (Status::kTimeout, or Error(kTimeout) in setup
/// calls); kForever means no limit. Write `sluice::Clock::now() + 5s`.
///
/// This header is the whole vocabulary of time shared by the public API
/// (flow.h, cluster.h) and the library's control plane, so that neither needs
/// the other's headers to agree on it.
///
/// Thread safety: types and a constant only.
#pragma once

#include <chrono>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {

/// The clock of every Deadline: std::chrono::steady_clock.
using Clock = std::chrono::steady_clock;
/// An absolute point in time after which a blocking call gives up (kTimeout).
using Deadline = Clock::time_point;
/// The Deadline that never passes: no limit (the default of every call that
/// takes a deadline).
inline constexpr Deadline kForever = Deadline::max();

}  // namespace sluice
SLUICE_API_END
