// sluice/detail/hash.h: the hash behind key routing. Internal; part of the
// public headers only because push() inlines it.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice::detail {

// A 64-bit finaliser (murmur3's fmix64): every input bit affects every output
// bit, so keys that differ only in their high bits, or that are all multiples
// of the target count, still spread evenly.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Hash of an arbitrary byte string: 8 bytes at a time, multiply-rotate, then
// mix64. Keys of up to 8 bytes hash exactly as mix64 of their zero-extended
// little-endian value, so a uint32_t key and a uint64_t key of the same value
// route alike.
inline uint64_t hash_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (n <= 8) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return mix64(v);
  }
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h ^= mix64(v);
    h = (h << 27 | h >> 37) * 0x9e3779b97f4a7c15ULL;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h ^= mix64(v ^ (uint64_t{n} << 56));
  }
  return mix64(h);
}

// Maps a 64-bit hash onto [0, n) without a division (Lemire's multiply-shift);
// uses the high bits of the hash, which mix64 makes uniform.
inline uint32_t reduce(uint64_t hash, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace sluice::detail
SLUICE_API_END
