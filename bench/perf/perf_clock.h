// Wall and CPU clocks for `sluice perf`: every measurement reports the
// process's own CPU time (getrusage user + system) next to wall time,
// because other work on the machine steals time (see MEASURING.md).
//
// Thread safety: pure functions; a CpuTimer is a value.
#pragma once

#include <sys/resource.h>

#include <chrono>

namespace sluice::tool::perf {

// User + system CPU seconds of this process so far.
inline double process_cpu_seconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// Wall and CPU time since construction.
class CpuTimer {
 public:
  CpuTimer() : cpu0_(process_cpu_seconds()), t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  double cpu_seconds() const { return process_cpu_seconds() - cpu0_; }

 private:
  double cpu0_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace sluice::tool::perf
