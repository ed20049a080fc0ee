/// @file
/// sluice/hash.h: the hash that key routing uses, for applications that must
/// know where a key goes (co-partitioning two flows, routing by hand with
/// push_to, checking a target's share) or that want a good cheap hash.
///
/// A flow declared with .key(&T::field) sends record r to
/// targets()[route_key(r.field, num_targets)] when the key has up to 8 bytes;
/// Source::target_of(r) says the same for any flow.
///
/// It also names how a flow chooses a record's target (Route): the shuffle
/// builders set it, FlowSpec carries it.
///
/// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "sluice/detail/hash.h"
#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {

/// A 64-bit finaliser (murmur3's fmix64): every input bit affects every
/// output bit.
inline uint64_t hash64(uint64_t x) { return detail::mix64(x); }

/// Hash of a byte string; up to 8 bytes hash as hash64 of their zero-extended
/// little-endian value (a uint32_t and a uint64_t key of one value agree).
inline uint64_t hash_bytes(std::span<const std::byte> bytes) {
  return detail::hash_bytes(bytes.data(), bytes.size());
}

/// Maps a 64-bit hash onto [0, n) (multiply-shift; uses its high bits).
inline uint32_t reduce_hash(uint64_t hash, uint32_t n) { return detail::reduce(hash, n); }

/// The target index of a key of up to 8 bytes among n targets.
inline uint32_t route_key(uint64_t key, uint32_t num_targets) {
  return reduce_hash(hash64(key), num_targets);
}

/// How a shuffle flow chooses each record's target (FlowSpec::route). The
/// builders set it: shuffle<T>() hashes the whole record, .key() a field,
/// .route() calls a function, .explicit_targets() (and every replicate flow)
/// leaves the choice to the caller's push_to().
enum class Route : uint8_t {
  kHashKey,     ///< a hash of a key field (FlowSpec::key_offset, key_size)
  kHashRecord,  ///< a hash of the whole record (no key declared)
  kFunction,    ///< FlowSpec::route_fn
  kExplicit,    ///< the caller names the target on every push (push_to)
};

/// A routing function for Route::kFunction: (record bytes, record size,
/// number of targets) -> the target's index, below the number of targets.
using RouteFunction = std::function<uint32_t(const void*, size_t, uint32_t)>;

}  // namespace sluice
SLUICE_API_END
