#include "data.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace sluice::join {

const char* to_string(KeyDist d) {
  switch (d) {
    case KeyDist::kUniform:
      return "uniform";
    case KeyDist::kZipf:
      return "zipf";
    case KeyDist::kEqual:
      return "equal";
  }
  return "?";
}

const char* to_string(RKeys k) { return k == RKeys::kUnique ? "unique" : "dist"; }

std::string DataSpec::describe() const {
  char buf[512];
  if (from_files()) {
    std::snprintf(buf, sizeof(buf), "R from %s, S from %s, %u-byte tuples", r_file.c_str(),
                  s_file.c_str(), width);
    return buf;
  }
  char dist_text[64];
  if (dist == KeyDist::kZipf)
    std::snprintf(dist_text, sizeof(dist_text), "zipf(%.2f)", theta);
  else
    std::snprintf(dist_text, sizeof(dist_text), "%s", to_string(dist));
  std::snprintf(buf, sizeof(buf),
                "|R|=%llu |S|=%llu, %u-byte tuples, key domain %llu, R keys %s, S keys %s, "
                "selectivity %.2f, seed %llu",
                static_cast<unsigned long long>(r_tuples),
                static_cast<unsigned long long>(s_tuples), width,
                static_cast<unsigned long long>(effective_domain()),
                r_keys == RKeys::kUnique ? "unique" : dist_text, dist_text, selectivity,
                static_cast<unsigned long long>(seed));
  return buf;
}

namespace {

constexpr uint64_t kStreamR = 1, kStreamS = 2, kStreamSelect = 3;

// Uniform 64-bit value number `attempt` of (stream, row): counter-based, so
// any process computes the same value for the same row.
inline uint64_t random_u64(uint64_t seed, uint64_t stream, uint64_t row, uint64_t attempt) {
  return hash64(hash64(seed * 0x9e3779b97f4a7c15ULL + stream) + row * 0xd1b54a32d192ed03ULL +
                attempt * 0x8cb92ba72f3d8dd7ULL);
}

inline double to_unit(uint64_t v) { return static_cast<double>(v >> 11) * 0x1.0p-53; }

// (log1p(x))/x and (expm1(x))/x, accurate near 0.
inline double helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
inline double helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1 + x * 0.5 * (1 + x * (1.0 / 3.0) * (1 + 0.25 * x));
}

}  // namespace

KeyGenerator::KeyGenerator(const DataSpec& spec)
    : spec_(spec),
      domain_(spec.effective_domain()),
      seed_mix_(hash64(spec.seed ^ 0x5851f42d4c957f2dULL)),
      select_all_(spec.selectivity >= 1.0) {
  if (!(spec.selectivity >= 0.0)) throw InputError("selectivity must be in [0, 1]");
  select_threshold_ = select_all_
                          ? ~uint64_t{0}
                          : static_cast<uint64_t>(std::ldexp(std::max(0.0, spec.selectivity), 64));
  if (spec.dist == KeyDist::kZipf) {
    if (!(spec.theta >= 0.0) || spec.theta > 20) throw InputError("--theta must be in [0, 20]");
    h_integral_x1_ = h_integral(1.5) - 1.0;
    h_integral_n_ = h_integral(static_cast<double>(domain_) + 0.5);
    s_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  }
}

double KeyGenerator::h(double x) const { return std::exp(-spec_.theta * std::log(x)); }

double KeyGenerator::h_integral(double x) const {
  const double log_x = std::log(x);
  return helper2((1.0 - spec_.theta) * log_x) * log_x;
}

double KeyGenerator::h_integral_inverse(double x) const {
  double t = x * (1.0 - spec_.theta);
  if (t < -1.0) t = -1.0;  // rounding can push it below the pole
  return std::exp(helper1(t) * x);
}

uint64_t KeyGenerator::zipf(uint64_t stream, uint64_t row) const {
  const double n = static_cast<double>(domain_);
  for (uint64_t attempt = 0;; ++attempt) {
    const double u = h_integral_n_ + to_unit(random_u64(spec_.seed, stream, row, attempt)) *
                                         (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1)
      k = 1;
    else if (k > n)
      k = n;
    if (k - x <= s_ || u >= h_integral(k + 0.5) - h(k)) return static_cast<uint64_t>(k) - 1;
  }
}

uint64_t KeyGenerator::draw(uint64_t stream, uint64_t row) const {
  switch (spec_.dist) {
    case KeyDist::kUniform:  // multiply-shift onto [0, D): no modulo bias worth the name, no
                             // division
      return static_cast<uint64_t>(
          (static_cast<unsigned __int128>(random_u64(spec_.seed, stream, row, 0)) * domain_) >> 64);
    case KeyDist::kZipf:
      return zipf(stream, row);
    case KeyDist::kEqual:
      return 0;
  }
  return 0;
}

uint64_t KeyGenerator::r_key(uint64_t row) const {
  if (spec_.r_keys == RKeys::kUnique) return key_of(row % domain_);
  return key_of(draw(kStreamR, row));
}

uint64_t KeyGenerator::s_key(uint64_t row) const {
  if (!select_all_ && random_u64(spec_.seed, kStreamSelect, row, 0) >= select_threshold_) {
    return key_of(domain_ + row);  // outside the domain: no R row has it
  }
  return key_of(draw(kStreamS, row));
}

template <class T>
std::vector<T> generate_rows(const DataSpec& spec, Relation rel, uint64_t begin, uint64_t end,
                             uint32_t threads) {
  const KeyGenerator keys(spec);
  std::vector<T> rows(end - begin);
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    const uint64_t b = part_begin(rows.size(), threads, t),
                   e = part_begin(rows.size(), threads, t + 1);
    pool.emplace_back(
        [&, b, e] { generate<T>(keys, rel, begin + b, std::span<T>(rows.data() + b, e - b)); });
  }
  for (auto& t : pool) t.join();
  return rows;
}

template std::vector<Tuple8> generate_rows(const DataSpec&, Relation, uint64_t, uint64_t, uint32_t);
template std::vector<Tuple16> generate_rows(const DataSpec&, Relation, uint64_t, uint64_t,
                                            uint32_t);

std::string fragment_path(const std::string& pattern, uint32_t rank) {
  std::string out = pattern;
  const std::string tag = "{rank}";
  for (size_t pos; (pos = out.find(tag)) != std::string::npos;)
    out.replace(pos, tag.size(), std::to_string(rank));
  return out;
}

namespace {

bool is_csv(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
}

template <class T>
std::vector<T> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open " + path + ": " + std::strerror(errno));
  std::vector<T> rows;
  if (is_csv(path)) {
    uint64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.empty() || line[0] == '#' || line == "\r") continue;
      if (line.back() == '\r') line.pop_back();
      // A field: spaces, then an unsigned decimal integer (from_chars takes
      // no sign: " -7" is an error, not 2^64 - 7), then spaces.
      size_t at = 0;
      auto field = [&](const char* what) {
        while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
        const size_t start = at;
        size_t stop = line.find(',', at);
        if (stop == std::string::npos) stop = line.size();
        size_t digits_end = stop;
        while (digits_end > start && (line[digits_end - 1] == ' ' || line[digits_end - 1] == '\t'))
          --digits_end;
        uint64_t v = 0;
        const auto [ptr, ec] = std::from_chars(line.data() + start, line.data() + digits_end, v);
        if (start == digits_end || ec != std::errc() || ptr != line.data() + digits_end) {
          throw InputError(path + ":" + std::to_string(line_no) + ":" + std::to_string(start + 1) +
                           ": the " + what + " must be an unsigned integer below 2^64, not '" +
                           line.substr(start, stop - start) + "' (a line is key or key,payload)");
        }
        at = stop;
        return v;
      };
      const uint64_t key = field("key");
      uint64_t payload = 0;
      if (at < line.size()) {
        ++at;  // the ','
        payload = field("payload");
        if (at < line.size()) {
          throw InputError(path + ":" + std::to_string(line_no) + ":" + std::to_string(at + 1) +
                           ": trailing text after key,payload: '" + line.substr(at) + "'");
        }
      }
      rows.push_back(make_tuple<T>(key, payload));
    }
    return rows;
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (size % sizeof(T) != 0) {
    throw InputError(path + ": " + std::to_string(size) + " bytes is not a whole number of " +
                     std::to_string(sizeof(T)) + "-byte tuples (is --width right?)");
  }
  rows.resize(size / sizeof(T));
  if (size != 0 &&
      !in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(size))) {
    throw InputError("cannot read " + path);
  }
  return rows;
}

}  // namespace

template <class T>
std::vector<T> load_fragment(const std::string& pattern, uint32_t rank, uint32_t world) {
  if (pattern.find("{rank}") != std::string::npos)
    return read_file<T>(fragment_path(pattern, rank));
  std::vector<T> all = read_file<T>(pattern);
  const uint64_t b = part_begin(all.size(), world, rank),
                 e = part_begin(all.size(), world, rank + 1);
  return std::vector<T>(all.begin() + static_cast<ptrdiff_t>(b),
                        all.begin() + static_cast<ptrdiff_t>(e));
}

template <class T>
std::vector<T> load_all(const std::string& pattern, uint32_t world) {
  if (pattern.find("{rank}") == std::string::npos) return read_file<T>(pattern);
  std::vector<T> all;
  for (uint32_t r = 0; r < world; ++r) {
    std::vector<T> part = read_file<T>(fragment_path(pattern, r));
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

template <class T>
void save_fragment(const std::string& pattern, uint32_t rank, const std::vector<T>& rows) {
  const std::string path = fragment_path(pattern, rank);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError("cannot create " + path + ": " + std::strerror(errno));
  if (is_csv(path)) {
    std::string text;
    for (const T& t : rows) {
      text += std::to_string(t.key);
      if constexpr (sizeof(T) == 16) {
        text += ',';
        text += std::to_string(payload_of(t));
      }
      text += '\n';
    }
    out << text;
  } else {
    out.write(reinterpret_cast<const char*>(rows.data()),
              static_cast<std::streamsize>(rows.size() * sizeof(T)));
  }
  if (!out) throw InputError("cannot write " + path);
}

template <class T>
Relations<T> local_fragments(const DataSpec& spec, uint32_t rank, uint32_t world,
                             uint32_t threads) {
  if (spec.from_files())
    return {load_fragment<T>(spec.r_file, rank, world), load_fragment<T>(spec.s_file, rank, world)};
  return {generate_rows<T>(spec, Relation::kR, part_begin(spec.r_tuples, world, rank),
                           part_begin(spec.r_tuples, world, rank + 1), threads),
          generate_rows<T>(spec, Relation::kS, part_begin(spec.s_tuples, world, rank),
                           part_begin(spec.s_tuples, world, rank + 1), threads)};
}

template <class T>
Relations<T> whole_relations(const DataSpec& spec, uint32_t world, uint32_t threads) {
  if (spec.from_files()) return {load_all<T>(spec.r_file, world), load_all<T>(spec.s_file, world)};
  return {generate_rows<T>(spec, Relation::kR, 0, spec.r_tuples, threads),
          generate_rows<T>(spec, Relation::kS, 0, spec.s_tuples, threads)};
}

template Relations<Tuple8> local_fragments(const DataSpec&, uint32_t, uint32_t, uint32_t);
template Relations<Tuple16> local_fragments(const DataSpec&, uint32_t, uint32_t, uint32_t);
template Relations<Tuple8> whole_relations(const DataSpec&, uint32_t, uint32_t);
template Relations<Tuple16> whole_relations(const DataSpec&, uint32_t, uint32_t);
template std::vector<Tuple8> load_fragment(const std::string&, uint32_t, uint32_t);
template std::vector<Tuple16> load_fragment(const std::string&, uint32_t, uint32_t);
template std::vector<Tuple8> load_all(const std::string&, uint32_t);
template std::vector<Tuple16> load_all(const std::string&, uint32_t);
template void save_fragment(const std::string&, uint32_t, const std::vector<Tuple8>&);
template void save_fragment(const std::string&, uint32_t, const std::vector<Tuple16>&);

}  // namespace sluice::join
