// The floor of YSB at 1 process x 1 worker on this machine: the fastest a
// loop can take 78-byte YSB records (apps/stream/include/stream/workloads.h)
// from memory, as sluice-stream and the peers take their generated input.
// Two loops over N records in memory: a hand-written YSB (views only,
// counted per campaign: no windows, no engine) and a plain read of every
// byte. Prints each repeat and the medians, in ns a record and GB/s.
// From the top of the tree (one line):
//   g++ -std=c++20 -O3 -march=native -Iapps/stream/include -Iinclude
//       -o /tmp/ysb_floor bench/stream/ysb_floor.cc
//   /tmp/ysb_floor 30000000
// (Not part of the build: a measurement for docs/stream.md, "Against
// Timely Dataflow and Flink".)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "stream/workloads.h"

namespace {

using sluice::stream::YsbEvent;  // the record sluice-stream and the peers take

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 30000000;
  std::vector<YsbEvent> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i].campaign_id = (i * 2654435761u) % 100;
    v[i].event_type = static_cast<uint8_t>((i * 40503u >> 7) % 3);
    v[i].event_time = static_cast<int64_t>(i / 1000);
  }
  std::vector<double> ysb, all;
  uint64_t sink = 0;
  for (int rep = 0; rep < 7; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t counts[100] = {};
    for (const YsbEvent& e : v)
      if (e.event_type == 0) ++counts[e.campaign_id];
    ysb.push_back(seconds_since(t0) * 1e9 / static_cast<double>(n));
    for (uint64_t c : counts) sink += c;
    const auto* w = reinterpret_cast<const uint64_t*>(v.data());
    const size_t words = n * sizeof(YsbEvent) / 8;
    t0 = std::chrono::steady_clock::now();
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= words; i += 4) {
      s0 += w[i];
      s1 += w[i + 1];
      s2 += w[i + 2];
      s3 += w[i + 3];
    }
    all.push_back(seconds_since(t0) * 1e9 / static_cast<double>(n));
    sink += s0 + s1 + s2 + s3;
    std::printf("repeat %d: ysb %.2f ns a record, read %.2f ns a record\n", rep, ysb.back(),
                all.back());
  }
  const double y = median(ysb), a = median(all);
  std::printf(
      "median of 7 over %zu records: ysb %.2f ns a record (%.1f GB/s, %.0f M records/s), "
      "read %.2f ns a record (%.1f GB/s)   [%llu]\n",
      n, y, 78 / y, 1e3 / y, a, 78 / a, static_cast<unsigned long long>(sink % 10));
}
