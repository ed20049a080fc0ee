// apps/join/tuples.h: the tuples the join moves, the hash that partitions
// them, and the order-independent checksum of a join result.
//
// Tuple widths: the join key is always 64 bits.
//   16 bytes (Tuple16): {u64 key, u64 payload}; a generated tuple's payload
//            is its row number in its relation, so the checksum can tell
//            which R row met which S row.
//    8 bytes (Tuple8):  {u64 key} only; the payload is taken as 0 (a
//            key-only join, the 8-byte tuples of the NAM and radix-join
//            papers). The match count is still exact; the checksum then
//            covers keys and multiplicities only.
//
// Thread safety: pure functions and plain values.
#pragma once

#include <sluice/hash.h>

#include <cstdint>
#include <type_traits>

namespace sluice::join {

struct Tuple8 {
  uint64_t key;
};
struct Tuple16 {
  uint64_t key;
  uint64_t payload;
};
static_assert(sizeof(Tuple8) == 8 && std::is_trivially_copyable_v<Tuple8>);
static_assert(sizeof(Tuple16) == 16 && std::is_trivially_copyable_v<Tuple16>);

inline uint64_t payload_of(const Tuple8&) { return 0; }
inline uint64_t payload_of(const Tuple16& t) { return t.payload; }

template <class T>
T make_tuple(uint64_t key, uint64_t payload) {
  if constexpr (std::is_same_v<T, Tuple8>) {
    (void)payload;
    return T{key};
  } else {
    return T{key, payload};
  }
}

// murmur3's 64-bit finaliser, as the flows' routing uses it.
using sluice::hash64;

// The hash every partitioning step uses. Which bits go where:
//   network partition (target endpoint): the top bits, via multiply-shift
//     (exactly the top log2(n) radix bits when n is a power of two);
//   local sub-partition (cache-sized table): the low `fbits` bits;
//   bucket inside a sub-partition table: the bits above those.
// One multiply and one xor-shift (it is computed up to three times per
// tuple, so it must be cheap): the product's high half is a good hash of the
// key (Fibonacci hashing) and the shift folds it into the low half too, so
// low bits are as usable as high ones even for sequential keys.
inline uint64_t key_hash(uint64_t key) {
  const auto p =
      static_cast<unsigned __int128>(key ^ 0x2545f4914f6cdd1dULL) * 0x9e3779b97f4a7c15ULL;
  return static_cast<uint64_t>(p >> 64) ^ static_cast<uint64_t>(p);
}

inline uint32_t network_partition(uint64_t hash, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

// One matching pair's contribution to the result checksum. The checksum of a
// join result is the wrapping sum of this over all result pairs, so it does
// not depend on the order pairs are found in; R's and S's payloads enter with
// different multipliers, so swapping them changes it.
inline uint64_t pair_checksum(uint64_t key, uint64_t r_payload, uint64_t s_payload) {
  return hash64(key * 0x9e3779b97f4a7c15ULL ^ r_payload * 0xc2b2ae3d27d4eb4fULL ^
                (s_payload + 0x165667b19e3779f9ULL) * 0xd6e8feb86659fd93ULL);
}

// The result of a join, or of part of one: sums of parts give the whole.
struct JoinResult {
  uint64_t matches = 0;
  uint64_t checksum = 0;
  void add(const JoinResult& o) {
    matches += o.matches;
    checksum += o.checksum;
  }
  friend bool operator==(const JoinResult&, const JoinResult&) = default;
};

}  // namespace sluice::join
