// The records `sluice perf` moves and the per-record work both sides of every
// measurement do, shared by the flow benchmark and the baseline ring so that
// their only difference is the transport.
//
// Thread safety: pure functions and types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "perf_stats.h"

namespace sluice::tool::perf {

// A record of exactly B bytes whose first word is its key. Large ones (up
// to 1 MiB) belong on the heap, not the stack.
template <size_t B>
struct Rec {
  static_assert(B > 8 && B % 8 == 0);
  uint64_t key;
  unsigned char pad[B - 8];
};
template <>
struct Rec<8> {
  uint64_t key;
};

// Keys are a cheap counter-based sequence that still spreads over targets.
inline constexpr uint64_t kKeyStep = 0x9e3779b97f4a7c15ULL;
inline uint64_t key_of(uint64_t i) { return i * kKeyStep; }

// Sum of key_of(i) for i in [first, first + n), modulo 2^64: what the
// consumers' checksums must add up to.
inline uint64_t key_sum(uint64_t first, uint64_t n) {
  // sum of i over the range = n*first + n*(n-1)/2, all modulo 2^64.
  const unsigned __int128 tri = static_cast<unsigned __int128>(n) * (n - (n > 0 ? 1 : 0)) / 2;
  return (static_cast<uint64_t>(tri) + n * first) * kKeyStep;
}

// Key 0 and a fixed byte pattern after it.
template <size_t B>
void fill_template_record(Rec<B>* r) {
  r->key = 0;
  if constexpr (B > 8) {
    for (size_t i = 0; i < sizeof(r->pad); ++i) r->pad[i] = static_cast<unsigned char>(i * 31 + 7);
  }
}

template <size_t B>
Rec<B> make_template_record() {
  Rec<B> r;
  fill_template_record(&r);
  return r;
}

// The consumer's per-record work: copy the record out (as an application
// would before the buffer is reused) and fold its key into a checksum. The
// empty asm makes the copy real: the compiler must assume the scratch record
// is read, so it cannot shrink the memcpy to a load of the key.
template <size_t B>
inline uint64_t take_record(const void* src, Rec<B>* scratch) {
  std::memcpy(scratch, src, B);
  asm volatile("" : : "r"(scratch) : "memory");
  return scratch->key;
}

namespace detail {
template <class Fn, size_t... I>
bool small_record_size(uint32_t bytes, Fn& fn, std::index_sequence<I...>) {
  return (
      (bytes == kMinRecordBytes + kRecordBytesStep * I
           ? (fn(std::integral_constant<size_t, kMinRecordBytes + kRecordBytesStep * I>{}), true)
           : false) ||
      ...);
}
// The powers of two above kSmallRecordsMax: 128 B << I.
template <class Fn, size_t... I>
bool large_record_size(uint32_t bytes, Fn& fn, std::index_sequence<I...>) {
  return ((bytes == (size_t{2 * kSmallRecordsMax} << I)
               ? (fn(std::integral_constant<size_t, (size_t{2 * kSmallRecordsMax} << I)>{}), true)
               : false) ||
          ...);
}
}  // namespace detail

// Throws std::invalid_argument naming a size this build cannot measure
// (sluice-perf-smoke measures only the sizes of --smoke), before any job starts.
inline void check_built_sizes(const std::vector<uint32_t>& sizes) {
#if defined(SLUICE_PERF_SMOKE_ONLY)
  for (uint32_t b : sizes) {
    if (b != 8 && b != 64 && b != 2048) {
      throw std::invalid_argument(
          "record size " + std::to_string(b) +
          ": this is sluice-perf-smoke, built for the sizes of --smoke (8, 64, 2048) only; "
          "`make perf` builds sluice-perf, which measures every size");
    }
  }
#else
  (void)sizes;
#endif
}

#if defined(SLUICE_PERF_SMOKE_ONLY)
// sluice-perf-smoke (the build `make test` runs with --smoke): only the
// sizes --smoke measures are compiled in, a tenth of the code of every size.
template <class Fn>
void with_record_size(uint32_t bytes, Fn&& fn) {
  switch (bytes) {
    case 8:
      fn(std::integral_constant<size_t, 8>{});
      return;
    case 64:
      fn(std::integral_constant<size_t, 64>{});
      return;
    case 2048:
      fn(std::integral_constant<size_t, 2048>{});
      return;
    default:
      throw std::invalid_argument(
          "record size " + std::to_string(bytes) +
          ": this is sluice-perf-smoke, built for the sizes of --smoke (8, 64, 2048) only; "
          "`make perf` builds sluice-perf, which measures every size");
  }
}
#else
// Calls fn(std::integral_constant<size_t, bytes>{}) for a runtime record size
// that parse_sizes accepted (is_supported_record_size).
template <class Fn>
void with_record_size(uint32_t bytes, Fn&& fn) {
  const bool hit =
      detail::small_record_size(
          bytes, fn,
          std::make_index_sequence<(kSmallRecordsMax - kMinRecordBytes) / kRecordBytesStep +
                                   1>{}) ||
      detail::large_record_size(bytes, fn, std::make_index_sequence<14>{});  // 128 B .. 1 MiB
  if (!hit)
    throw std::invalid_argument("record size " + std::to_string(bytes) + " is not supported");
}
#endif

}  // namespace sluice::tool::perf
