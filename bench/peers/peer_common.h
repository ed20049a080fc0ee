// What the peer programs of bench/peers share with `sluice perf`: the same
// records (a key in the first word, a fixed byte pattern after it), the same
// per-record work at the receiver (copy out, fold the key into a checksum),
// the process's own CPU time, nearest-rank percentiles, and samples printed
// as one JSON line in the fields of bench/perf/perf_stats.h.
//
// Thread safety: pure functions; one thread per process.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace peers {

inline constexpr uint64_t kKeyStep = 0x9e3779b97f4a7c15ULL;  // as bench/perf/perf_records.h
inline uint64_t key_of(uint64_t i) { return i * kKeyStep; }

inline double cpu_seconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Nearest rank, as perf_stats.h's percentile.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double exact = p / 100.0 * static_cast<double>(v.size()) - 1e-9;
  size_t rank = static_cast<size_t>(std::ceil(exact));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

// A record buffer of `bytes` (>= 8): key 0, then the pattern perf_records.h uses.
inline std::vector<unsigned char> make_record(size_t bytes) {
  std::vector<unsigned char> r(bytes, 0);
  for (size_t i = 8; i < bytes; ++i) r[i] = static_cast<unsigned char>((i - 8) * 31 + 7);
  return r;
}

inline void set_key(unsigned char* rec, uint64_t key) { std::memcpy(rec, &key, sizeof key); }

// The receiver's per-record work: copy out into scratch, return the key.
inline uint64_t take_record(const unsigned char* src, unsigned char* scratch, size_t bytes) {
  std::memcpy(scratch, src, bytes);
  asm volatile("" : : "r"(scratch) : "memory");
  uint64_t k;
  std::memcpy(&k, scratch, sizeof k);
  return k;
}

// Round trips for a record size, as perf_stats.h's round_trips_for.
inline uint32_t round_trips_for(uint32_t requested, uint32_t bytes) {
  const uint64_t cap = (uint64_t{256} << 20) / std::max<uint32_t>(bytes, 1);
  return static_cast<uint32_t>(std::min<uint64_t>(requested, std::max<uint64_t>(100, cap)));
}

// The value of `--name` in argv, or `fallback`.
inline std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

inline std::vector<uint32_t> parse_list(const std::string& s) {
  std::vector<uint32_t> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(
        static_cast<uint32_t>(std::strtoul(s.substr(start, comma - start).c_str(), nullptr, 10)));
    start = comma + 1;
  }
  return out;
}

// One sample line (perf_stats.h fields); rtt < 0 leaves the latency fields out.
inline void print_sample(uint32_t bytes, double records, double seconds, double src_cpu,
                         double tgt_cpu, double p50 = -1, double p99 = -1, double p999 = -1) {
  std::printf(
      "{\"record_bytes\": %u, \"records\": %.0f, \"seconds\": %.9f, \"cpu_seconds\": %.6f, "
      "\"src_cpu_seconds\": %.6f, \"tgt_cpu_seconds\": %.6f",
      bytes, records, seconds, src_cpu + tgt_cpu, src_cpu, tgt_cpu);
  if (p50 >= 0)
    std::printf(", \"rtt_us_p50\": %.4f, \"rtt_us_p99\": %.4f, \"rtt_us_p999\": %.4f", p50, p99,
                p999);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace peers
