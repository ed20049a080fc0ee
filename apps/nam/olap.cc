#include "olap.h"

#include <algorithm>
#include <cstdio>

#include "tuples.h"

namespace sluice::nam::olap {

namespace {

// Salts that keep the hashes of one row number for different purposes apart.
constexpr uint64_t kShareSalt = 0x5bd1e9955bd1e995ULL, kKeySalt = 0x3c6ef372fe94f82bULL,
                   kGroupSalt = 0xa54ff53a5f1d36f1ULL, kValueSalt = 0x510e527fade682d1ULL;

uint64_t key_of_index(const JoinInput& in, uint64_t index) {
  // mix64 and xor with a constant are bijections: distinct indexes, distinct keys.
  return mix64(index ^ (in.seed * kKeySalt));
}

}  // namespace

bool is_shared(const JoinInput& in, uint64_t index) {
  const double u = static_cast<double>(mix64(index ^ (in.seed * kShareSalt) ^ kShareSalt) >> 11) *
                   0x1p-53;  // uniform in [0, 1)
  return u < in.selectivity;
}

Tuple r_row(const JoinInput& in, uint64_t i) {
  const uint64_t index = is_shared(in, i) ? i : in.r_rows + i;
  return Tuple{key_of_index(in, index), i};
}

Tuple s_row(const JoinInput& in, uint64_t j) {
  const uint64_t k = in.r_rows == 0 ? 0 : j % in.r_rows;
  const uint64_t index = in.r_rows != 0 && is_shared(in, k) ? k : 2 * in.r_rows + j;
  return Tuple{key_of_index(in, index), j};
}

Row agg_row(const AggInput& in, uint64_t i) {
  const uint64_t key = mix64(i ^ (in.seed * kGroupSalt) ^ kGroupSalt) % in.groups;
  const uint64_t value = mix64(i ^ (in.seed * kValueSalt) ^ kValueSalt) >> 44;
  return Row{key, value};
}

Range server_slice(uint64_t rows, uint32_t m, uint32_t servers) {
  const auto at = [&](uint32_t k) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(rows) * k / servers);
  };
  return Range{at(m), at(m + 1)};
}

Range worker_share(Range slice, uint32_t w, uint32_t workers) {
  const uint64_t n = slice.size();
  const auto at = [&](uint32_t k) {
    return slice.lo + static_cast<uint64_t>(static_cast<unsigned __int128>(n) * k / workers);
  };
  return Range{at(w), at(w + 1)};
}

JoinResult reference_join(const JoinInput& in) {
  // A sort-merge join: nothing like the distributed hash joins it checks.
  std::vector<Tuple> r(in.r_rows), s(in.s_rows);
  for (uint64_t i = 0; i < in.r_rows; ++i) r[i] = r_row(in, i);
  for (uint64_t j = 0; j < in.s_rows; ++j) s[j] = s_row(in, j);
  const auto by_key = [](const Tuple& a, const Tuple& b) { return a.key < b.key; };
  std::sort(r.begin(), r.end(), by_key);
  std::sort(s.begin(), s.end(), by_key);
  JoinResult out;
  size_t a = 0, b = 0;
  while (a < r.size() && b < s.size()) {
    if (r[a].key < s[b].key) {
      ++a;
    } else if (s[b].key < r[a].key) {
      ++b;
    } else {
      size_t a_end = a, b_end = b;
      while (a_end < r.size() && r[a_end].key == r[a].key) ++a_end;
      while (b_end < s.size() && s[b_end].key == s[b].key) ++b_end;
      for (size_t x = a; x < a_end; ++x) {
        for (size_t y = b; y < b_end; ++y) {
          ++out.matches;
          out.checksum += pair_hash(r[x].key, r[x].payload, s[y].payload);
          out.flow_checksum += sluice::join::pair_checksum(r[x].key, r[x].payload, s[y].payload);
        }
      }
      a = a_end;
      b = b_end;
    }
  }
  return out;
}

AggResult reference_agg(const AggInput& in) {
  std::vector<Row> rows(in.rows);
  for (uint64_t i = 0; i < in.rows; ++i) rows[i] = agg_row(in, i);
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.key < b.key; });
  AggResult out;
  out.rows = in.rows;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    uint64_t sum = 0;
    for (; j < rows.size() && rows[j].key == rows[i].key; ++j) sum += rows[j].value;
    ++out.groups;
    out.checksum += group_hash(rows[i].key, j - i, sum);
    i = j;
  }
  return out;
}

void dump_csv(const Tuple* rows, uint64_t n, const char* header, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw OlapError("cannot write " + path);
  std::fprintf(f, "%s\n", header);
  for (uint64_t i = 0; i < n; ++i) {
    std::fprintf(f, "%llu,%llu\n", static_cast<unsigned long long>(rows[i].key),
                 static_cast<unsigned long long>(rows[i].payload));
  }
  if (std::fclose(f) != 0) throw OlapError("cannot write " + path);
}

}  // namespace sluice::nam::olap
