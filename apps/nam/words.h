// apps/nam/words.h: 8-byte words in byte buffers (region images, log
// entries, messages), read and written without alignment.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace sluice::nam {

inline uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
// A word's bytes, for a one-sided read into it.
inline std::span<std::byte> bytes_of(uint64_t& v) {
  return std::as_writable_bytes(std::span(&v, 1));
}

}  // namespace sluice::nam
