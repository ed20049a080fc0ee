// apps/kv/store_helpers.h: what the store's command files (store_hashes.cc,
// store_lists.cc, store_sets.cc, store_zsets.cc) share: a command's result,
// its numbers, and the bound on what a random choice with repeats makes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "store.h"

namespace kv::detail {

// A command's result: its reply, and whether it took effect.
inline Result done(std::string value, bool ok = true) { return result_of(std::move(value), ok); }

// A decimal argument the gateway checked (0 for one that is not).
inline int64_t number(const std::string& text) { return number_or_zero(text); }

// The most bytes SRANDMEMBER, HRANDFIELD or ZRANDMEMBER with a negative
// count makes before it gives up (a malformed entry must not make a
// replica allocate without bound; the gateway refuses such counts, and the
// Store refuses a reply past max_result_bytes anyway).
inline constexpr size_t kChoiceBytes = 64u << 20;

}  // namespace kv::detail
