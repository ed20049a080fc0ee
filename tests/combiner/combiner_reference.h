// What the combiner tests compare against: a deterministic input generator
// (uniform and Zipf-skewed keys) and single-process reference aggregates
// computed the plain sequential way, plus the check of one Group against
// them with the tolerance combiner.h documents for floating SUM and AVG.
// Shared by the unit test and by the worker program of the system test.
#pragma once

#include <sluice/combiner.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice::combiner_test {

// splitmix64: a tiny deterministic generator every rank can replay.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Zipf over ranks 0..n-1: P(k) proportional to 1 / (k+1)^s, by inverting the
// cumulative distribution (a binary search of a table built once).
class Zipf {
 public:
  Zipf(uint64_t n, double s) : cdf_(n) {
    double total = 0;
    for (uint64_t k = 0; k < n; ++k)
      cdf_[k] = (total += 1.0 / std::pow(static_cast<double>(k + 1), s));
    for (double& c : cdf_) c /= total;
  }
  // The rank for a uniform 64-bit number.
  uint64_t operator()(uint64_t u) const {
    const double x = static_cast<double>(u >> 11) * 0x1.0p-53;
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), x);
    return std::min<uint64_t>(static_cast<uint64_t>(it - cdf_.begin()), cdf_.size() - 1);
  }
  // Probability of rank k.
  double p(uint64_t k) const { return k == 0 ? cdf_[0] : cdf_[k] - cdf_[k - 1]; }

 private:
  std::vector<double> cdf_;
};

// The documented bound on |SUM - sequential sum| for n values whose
// absolute values add up to abs_sum: 2 * gamma(n-1) * abs_sum.
inline double float_sum_tolerance(uint64_t n, double abs_sum) {
  const double u = 0x1.0p-53;
  const double k = static_cast<double>(n > 0 ? n - 1 : 0);
  // abs_sum is itself a rounded double sum: allow for that with 1e-12.
  return 2 * (k * u / (1 - k * u)) * abs_sum * (1 + 1e-12);
}

// Sequential aggregates of one field of one group, computed the obvious way:
// integers summed with wrapping 64-bit arithmetic, floats summed in double
// left to right, MIN/MAX with < and > (inputs here are never NaN).
template <class V>
struct RefField {
  using Sum = SumType<V>;
  uint64_t count = 0;
  Sum sum = 0;
  double abs_sum = 0;
  V min{}, max{};

  void add(V v) {
    if constexpr (std::is_floating_point_v<V>) {
      sum += static_cast<double>(v);
      abs_sum += std::fabs(static_cast<double>(v));
    } else {
      sum =
          static_cast<Sum>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(static_cast<Sum>(v)));
    }
    if (count == 0 || v < min) min = v;
    if (count == 0 || v > max) max = v;
    ++count;
  }
};

// Checks that group `g` holds `count` records; appends a line to *why if not.
inline bool check_count(const Group& g, uint64_t count, std::string* why) {
  if (g.count == count) return true;
  *why += "group " + std::to_string(g.key) + " count " + std::to_string(g.count) + ", expected " +
          std::to_string(count) + "\n";
  return false;
}

// Checks the aggregates `aggs` (detail::kAgg* bits) of field `m` of group `g`
// against `ref`; on a difference appends a line to *why and returns false.
template <class T, class V>
bool check_field(const Group& g, V T::*m, const char* name, uint8_t aggs, const RefField<V>& ref,
                 std::string* why) {
  bool ok = true;
  auto fail = [&](const char* agg, const std::string& got, const std::string& want) {
    *why += "group " + std::to_string(g.key) + " " + agg + "(" + name + ") = " + got +
            ", expected " + want + "\n";
    ok = false;
  };
  auto text = [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(v));
      return std::string(buf);
    } else {
      return std::to_string(v);
    }
  };
  const double sum_tol = float_sum_tolerance(ref.count, ref.abs_sum);
  if (aggs & detail::kAggSum) {
    const auto got = g.sum(m);
    if constexpr (std::is_floating_point_v<V>) {
      if (!(std::fabs(got - ref.sum) <= sum_tol))
        fail("sum", text(got), text(ref.sum) + " +- " + text(sum_tol));
    } else if (got != ref.sum) {
      fail("sum", text(got), text(ref.sum));
    }
  }
  if ((aggs & detail::kAggMin) &&
      std::bit_cast<std::array<unsigned char, sizeof(V)>>(g.min(m)) !=
          std::bit_cast<std::array<unsigned char, sizeof(V)>>(ref.min)) {
    fail("min", text(g.min(m)), text(ref.min));
  }
  if ((aggs & detail::kAggMax) &&
      std::bit_cast<std::array<unsigned char, sizeof(V)>>(g.max(m)) !=
          std::bit_cast<std::array<unsigned char, sizeof(V)>>(ref.max)) {
    fail("max", text(g.max(m)), text(ref.max));
  }
  if (aggs & detail::kAggAvg) {
    const double want = static_cast<double>(ref.sum) / static_cast<double>(ref.count);
    const double got = g.avg(m);
    // An integer AVG divides the same exact sum; a float AVG carries the
    // SUM's tolerance divided by the count, plus the division's rounding.
    const double tol = std::is_floating_point_v<V> ? sum_tol / static_cast<double>(ref.count) +
                                                         4 * 0x1.0p-53 * std::fabs(want)
                                                   : 0.0;
    if (!(std::fabs(got - want) <= tol)) fail("avg", text(got), text(want));
  }
  return ok;
}

}  // namespace sluice::combiner_test
