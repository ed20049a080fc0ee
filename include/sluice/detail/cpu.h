// sluice/detail/cpu.h: the one spin-wait hint, for the inline Latency
// consume (flow_cores.h) and the library's own waits (src/common/futex.h).
// Internal: applications never name it.
#pragma once

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice::detail {

// Tells the core that this thread spins (x86 `pause`, Arm `yield`), so that
// a sibling hyperthread runs and the spin's exit is not mispredicted.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace sluice::detail
SLUICE_API_END
