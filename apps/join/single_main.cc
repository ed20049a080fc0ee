// sluice-join-single: the COST baseline. One thread joins all of R and S in
// memory, with the same data flags as sluice-join (so the same tuples):
//
//   sluice-join-single --r 4000000 --s 4000000 --method both --repeat 3 --json
//
// Two methods: `hash` (one bucket-chained table over the smaller relation,
// probed with every tuple of the other: the reference join) and `radix`
// (partition both into cache-sized sub-partitions first, then build and
// probe each: the same local kernel the distributed join runs per thread).
// Generating the data is not timed; allocating the partition buffers is not
// timed either (the distributed joins preallocate theirs at setup too).
#include <sluice/job.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "data.h"
#include "local_join.h"
#include "options.h"

namespace sj = sluice::join;
using Clock = std::chrono::steady_clock;

namespace {

struct Runs {
  std::vector<double> seconds, cpu;
  sj::JoinResult result;
  sj::LocalTimes last_times;
  double median() const {
    auto v = seconds;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double min() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return *std::max_element(seconds.begin(), seconds.end()); }
  double cpu_median() const {
    auto v = cpu;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

template <class T>
int run(const sj::Options& opt, const sluice::JobFlags& flags) {
  const auto [r, s] = sj::whole_relations<T>(opt.data, opt.file_ranks, 2);
  std::vector<std::pair<std::string, Runs>> methods;
  for (const char* m : {"hash", "radix"}) {
    if (opt.method != "both" && opt.method != m) continue;
    Runs runs;
    for (uint32_t i = 0; i < opt.repeat; ++i) {
      const double c0 = sluice::process_cpu_seconds();
      const auto t0 = Clock::now();
      sj::LocalTimes times;
      const sj::JoinResult res = std::string(m) == "hash" ? sj::hash_join<T>(r, s)
                                                          : sj::radix_join<T, Clock>(r, s, &times);
      // radix_join times only partition+build+probe (its buffers are set up first).
      const double secs = std::string(m) == "hash"
                              ? std::chrono::duration<double>(Clock::now() - t0).count()
                              : times.partition + times.build + times.probe;
      runs.seconds.push_back(secs);
      runs.cpu.push_back(std::string(m) == "hash" ? sluice::process_cpu_seconds() - c0 : times.cpu);
      runs.result = res;
      runs.last_times = times;
    }
    methods.emplace_back(m, runs);
  }
  bool agree = true;
  for (const auto& [name, runs] : methods) agree &= runs.result == methods.front().second.result;
  const double tuples = static_cast<double>(r.size() + s.size());
  for (const auto& [name, runs] : methods) {
    if (flags.json) {
      std::printf(
          "{\"program\":\"sluice-join-single\",\"method\":\"%s\",\"width\":%u,\"r\":%zu,\"s\":%zu,"
          "\"dist\":\"%s\",\"theta\":%.3f,\"seed\":%" PRIu64 ",\"matches\":%" PRIu64
          ",\"checksum\":\"%016" PRIx64
          "\",\"runs\":%zu,\"seconds_median\":%.6f,\"seconds_min\":%.6f,"
          "\"seconds_max\":%.6f,\"cpu_seconds_median\":%.6f,\"tuples_per_s\":%.0f,\"partition\":%."
          "6f,\"build\":%.6f,"
          "\"probe\":%.6f}\n",
          name.c_str(), opt.data.width, r.size(), s.size(), sj::to_string(opt.data.dist),
          opt.data.theta, opt.data.seed, runs.result.matches, runs.result.checksum,
          runs.seconds.size(), runs.median(), runs.min(), runs.max(), runs.cpu_median(),
          tuples / runs.median(), runs.last_times.partition, runs.last_times.build,
          runs.last_times.probe);
    } else {
      std::printf("sluice-join-single %-5s %" PRIu64 " matches, checksum %016" PRIx64
                  ", %.3f s median (min %.3f, max %.3f, %zu runs), %.1f M tuples/s\n",
                  name.c_str(), runs.result.matches, runs.result.checksum, runs.median(),
                  runs.min(), runs.max(), runs.seconds.size(), tuples / runs.median() / 1e6);
    }
  }
  if (!agree) {
    std::printf("verify: MISMATCH: the hash and radix methods disagree\n");
    return 1;
  }
  if (flags.verify) std::printf("verify: OK (methods agree)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job("sluice-join-single", "The COST baseline: one thread joins all of R and S",
                  sluice::kFlagJson | sluice::kFlagVerify);
  sj::Options opt;
  sj::add_single_options(job.cli(), opt);
  if (std::optional<int> status = job.parse(argc, argv)) return *status;
  return job.run_local([&] {
    return opt.data.width == 8 ? run<sj::Tuple8>(opt, job.flags())
                               : run<sj::Tuple16>(opt, job.flags());
  });
}
