// The wire format of a combiner partial: the aggregates of one group from
// one source, sent as one byte record of the flow of partials (see
// sluice/flow.h for byte records). The flow frames it with its own 4-byte
// length, so in a ring the key and every later word are 8-byte aligned:
//
//   0          4              12             20             20 + 8*slots
//   +----------+--------------+--------------+--------------+---
//   | tag u32  | key u64      | count u64    | slot[0] u64  | ... slot[slots-1]
//   +----------+--------------+--------------+--------------+---
//
// tag: CombineLayout::tag of the sender (a hash of its layout), so that a
// target recognises partials of another layout. count >= 1. slot i holds
// the aggregate of CombineLayout::ops[i] in its held form (int64_t, uint64_t
// or the bits of a double). Host byte order, like every record sluice moves.
#pragma once

#include <cstdint>

#include "sluice/flow.h"

namespace sluice::detail {

inline constexpr uint32_t kPartialTagOffset = 0;
inline constexpr uint32_t kPartialKeyOffset = 4;
inline constexpr uint32_t kPartialCountOffset = 12;
inline constexpr uint32_t kPartialSlotsOffset = 20;
static_assert(kPartialKeyOffset + kRecordHeaderBytes == 8,
              "the key must be 8-byte aligned in a ring");
static_assert(kPartialSlotsOffset + kRecordHeaderBytes == 24,
              "slots must be 8-byte aligned in a ring");

// Bytes of a partial with `slots` aggregate slots.
constexpr uint32_t partial_bytes(uint32_t slots) { return kPartialSlotsOffset + 8 * slots; }

}  // namespace sluice::detail
