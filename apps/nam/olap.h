// apps/nam/olap.h: the analytics on network-attached memory (paper section
// 5): the inputs the memory servers hold, how they are generated, the
// order-independent checksums of a join result and of an aggregation, and the
// single-process references they are checked against.
//
// Join input (16-byte tuples {key, payload}; payload = the row number):
//   R has --r rows, S has --s rows. An index k in [0, |R|) is "shared" with
//   probability --selectivity (a hash of seed and k decides). R row i has
//   index i if it is shared, else |R| + i (a key only R has); S row j has
//   index j mod |R| if that is shared, else 2|R| + j (a key only S has).
//   key = a bijective mix of the index, so distinct indexes never collide.
//   Hence a share `selectivity` of each relation has a join partner, the
//   selectivity of a perfect Bloom filter in the paper's sense.
// Aggregation input (16-byte rows {key, value}): row i has key = a hash of
//   (seed, i) modulo --groups and value = 20 bits of another hash.
// Generation is counter-based: a row depends only on the seed and its row
// number, so the memory servers' slices do not depend on how many there are,
// and one process regenerates everything for the reference.
//
// Checksums (wrapping 64-bit sums, so independent of the order results are
// found in; tests/nam/duckdb_olap.py computes the same from DuckDB's rows):
//   join: sum over result pairs of mix64(key*C1 ^ r.payload*C2 ^ (s.payload+C3)*C4)
//   aggregation: sum over groups of mix64(key*C1 ^ count*C2 ^ (sum+C3)*C4)
//
// Thread safety: pure functions and plain values.
#pragma once

#include <sluice/hash.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::nam::olap {

// A failed remote operation or bad input; the message says which.
class OlapError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Tuple {  // join input
  uint64_t key;
  uint64_t payload;
};
struct Row {  // aggregation input
  uint64_t key;
  uint64_t value;
};
struct Partial {  // a (pre-)aggregated group
  uint64_t key;
  uint64_t count;
  uint64_t sum;
};
static_assert(sizeof(Tuple) == 16 && sizeof(Row) == 16 && sizeof(Partial) == 24);

inline constexpr uint64_t kC1 = 0x9e3779b97f4a7c15ULL, kC2 = 0xc2b2ae3d27d4eb4fULL,
                          kC3 = 0x165667b19e3779f9ULL, kC4 = 0x27d4eb2f165667c5ULL;

inline uint64_t mix64(uint64_t x) { return sluice::hash64(x); }
inline uint64_t pair_hash(uint64_t key, uint64_t r_payload, uint64_t s_payload) {
  return mix64(key * kC1 ^ r_payload * kC2 ^ (s_payload + kC3) * kC4);
}
inline uint64_t group_hash(uint64_t key, uint64_t count, uint64_t sum) {
  return mix64(key * kC1 ^ count * kC2 ^ (sum + kC3) * kC4);
}

struct JoinInput {
  uint64_t r_rows = 0, s_rows = 0;
  double selectivity = 1.0;
  uint64_t seed = 1;
};
struct AggInput {
  uint64_t rows = 0, groups = 1;
  uint64_t seed = 1;
};

bool is_shared(const JoinInput& in, uint64_t index);
Tuple r_row(const JoinInput& in, uint64_t i);
Tuple s_row(const JoinInput& in, uint64_t j);
Row agg_row(const AggInput& in, uint64_t i);

// Rows [lo, hi) of a relation of `rows` rows that memory server m of M holds,
// and the share of them that worker w of W reads.
struct Range {
  uint64_t lo = 0, hi = 0;
  uint64_t size() const { return hi - lo; }
};
Range server_slice(uint64_t rows, uint32_t m, uint32_t servers);
Range worker_share(Range slice, uint32_t w, uint32_t workers);

// What a join or an aggregation produced (or must produce).
struct JoinResult {
  uint64_t matches = 0, checksum = 0;
  // The same pairs folded with apps/join's checksum (join::pair_checksum in
  // apps/join/tuples.h), which the flow radix join of apps/join reports.
  uint64_t flow_checksum = 0;
};
struct AggResult {
  uint64_t groups = 0, rows = 0, checksum = 0;
};

// The single-process references: regenerate everything, join by sorting
// both relations and merging; aggregate by sorting the rows by key.
JoinResult reference_join(const JoinInput& in);
AggResult reference_agg(const AggInput& in);

// Writes what a memory server holds (16-byte rows of two u64 columns) as CSV
// with the header `header` ("key,payload" / "key,value"), for the DuckDB
// oracle of the tests. Throws OlapError if the file cannot be written.
void dump_csv(const Tuple* rows, uint64_t n, const char* header, const std::string& path);

}  // namespace sluice::nam::olap
