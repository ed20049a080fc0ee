// Unpredictable numbers for identities and keys peers must not guess
// (region nonces, RMA keys, client tokens): from the kernel's CSPRNG.
//
// Thread safety: any thread.
#pragma once

#include <cstdint>

namespace sluice::detail {

// 64 random bits from getrandom(2). Throws Error(kResource) if the kernel
// cannot provide them (it blocks only before the pool is first seeded).
uint64_t random_u64();

}  // namespace sluice::detail
