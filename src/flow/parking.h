// How a blocked source or target waits: it spins (spin_iterations), then
// yields the CPU (kYieldRounds), then parks in slices (on a futex for shm
// rings, on the completion queue for ofi rings) and re-checks its deadline
// and its peers' liveness between slices. Publishers wake a parked peer
// only if it announced that it parks (shm_ring::wake_if_waiting).
//
// Thread safety: stateless; the words passed in are shared with the peer.
#pragma once

#include <chrono>
#include <cstdint>

#include "sluice/deadline.h"

namespace sluice::detail {

// A parked thread re-checks deadlines and peer liveness at least this often.
inline constexpr auto kParkSlice = std::chrono::milliseconds(50);
// A target with both shm and ofi rings parks on its completion queue, which
// shm publishers cannot wake: it looks at its shm rings this often.
inline constexpr auto kMixedParkSlice = std::chrono::milliseconds(1);
// sched_yield() rounds between spinning and parking: on an oversubscribed
// machine they let the peer we wait for run without paying a futex round trip.
inline constexpr uint32_t kYieldRounds = 64;
// A parked wait for a provider queue to drain sleeps this long at a time.
inline constexpr auto kQueueParkSlice = std::chrono::milliseconds(1);
// try_consume / try_push look at peer liveness at most this often.
inline constexpr auto kLivenessEvery = std::chrono::milliseconds(1);
// While spinning on an ofi ring, drive the completion queue every this many
// iterations (each read may be a system call on tcp).
inline constexpr uint32_t kSpinProgressEvery = 64;

// How long to park now: `slice`, or less if the deadline comes sooner.
std::chrono::nanoseconds until(Deadline deadline, std::chrono::nanoseconds slice = kParkSlice);
// The same in whole milliseconds (never negative), for completion-queue waits.
std::chrono::milliseconds until_ms(Deadline deadline, std::chrono::milliseconds slice);

}  // namespace sluice::detail
