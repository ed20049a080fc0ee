// apps/join/timing.h: the process's CPU time, reported beside wall time
// (MEASURING.md: other work on the machine steals time).
//
// Thread safety: reentrant.
#pragma once

#include <sys/resource.h>

namespace sluice::join {

// User + system CPU seconds of this process (all threads) so far.
inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace sluice::join
