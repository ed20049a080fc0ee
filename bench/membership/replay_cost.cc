// What sluice::ReplayFlow costs against the plain flow it is built on: the
// same single-threaded loop on every rank (push a run of records to every
// rank, then consume what came), once through Source/Target and once
// through ReplayFlow (every record kept until its target's commit(), every
// `--commit-ms`), alternating, in one job. Rank 0 prints each round's wall
// time and its process's CPU time, then the medians and their ratios:
//   sluice run -n 3 -- build/bin/sluice-bench-replay-cost --records 2000000 --rounds 5
// A benchmark program, not a test (docs/guide.md, "Membership views").
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/replay.h"

namespace {

struct Rec {
  uint64_t key;
  uint64_t position;
  uint64_t value;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The loop both kinds run: push runs to every rank, then consume what came,
// never waiting (a yield between passes); `ends` pushes, flushes, closes
// and consumes (and tick() runs once a pass). Returns the records consumed.
template <class Ends>
uint64_t run_loop(Ends& ends, uint32_t n, uint64_t records) {
  std::vector<uint64_t> next(n, 0);
  uint64_t got = 0;
  bool closed = false, ended = false;
  const sluice::Deadline now = sluice::Deadline::min();
  while (!ended) {
    bool all = true;
    for (uint32_t t = 0; t < n; ++t) {
      for (int k = 0; k < 512 && next[t] < records; ++k) {
        if (ends.push(t, Rec{t, next[t], next[t]}, now) != sluice::Status::kOk) break;
        ++next[t];
      }
      all = all && next[t] == records;
    }
    if (all && !closed) closed = ends.close(now) == sluice::Status::kOk;
    if (!all) (void)ends.flush(now);
    for (int k = 0; k < 64; ++k) {
      auto b = ends.consume(now);
      if (!b) {
        ended = b.status() == sluice::Status::kEndOfFlow;
        if (!ended && b.status() != sluice::Status::kTimeout)
          throw sluice::Error(sluice::ErrorCode::kInternal, ends.error());
        break;
      }
      got += b->size();
    }
    std::this_thread::yield();
    ends.tick();
  }
  return got;
}

// A round through the plain flow.
struct PlainEnds {
  sluice::Source<Rec> src;
  sluice::Target<Rec> dst;
  sluice::Status push(uint32_t t, const Rec& r, sluice::Deadline d) { return src.push_to(t, r, d); }
  sluice::Status flush(sluice::Deadline d) { return src.flush(d); }
  sluice::Status close(sluice::Deadline d) { return src.close(d); }
  auto consume(sluice::Deadline d) { return dst.consume(d); }
  const std::string& error() const { return dst.error(); }
  void tick() {}
};

uint64_t plain_round(sluice::Cluster& cluster, const sluice::ShuffleSpec<Rec>& spec,
                     uint64_t records) {
  auto flow = cluster.declare(spec);
  PlainEnds ends{cluster.source(spec, 0), cluster.target(spec, 0)};
  return run_loop(ends, cluster.world_size(), records);
}

// The same through a ReplayFlow, committing every `commit_ms`.
struct ReplayEnds {
  sluice::ReplayFlow<Rec>& flow;
  std::chrono::milliseconds every;
  sluice::Clock::time_point last = sluice::Clock::now();
  sluice::Status push(uint32_t t, const Rec& r, sluice::Deadline d) { return flow.push(t, r, d); }
  sluice::Status flush(sluice::Deadline d) { return flow.flush(d); }
  sluice::Status close(sluice::Deadline d) { return flow.close(d); }
  auto consume(sluice::Deadline d) { return flow.consume(d); }
  const std::string& error() const { return flow.error(); }
  void tick() {
    if (sluice::Clock::now() - last <= every) return;
    (void)flow.commit();
    last = sluice::Clock::now();
  }
};

uint64_t replay_round(sluice::Cluster& cluster, const sluice::ShuffleSpec<Rec>& spec,
                      uint64_t records, int commit_ms) {
  sluice::ReplayFlow<Rec> flow(cluster, spec);
  if (flow.open(cluster.view()) != sluice::Status::kOk)
    throw sluice::Error(sluice::ErrorCode::kInternal, flow.error());
  ReplayEnds ends{flow, std::chrono::milliseconds(commit_ms)};
  const uint64_t got = run_loop(ends, cluster.world_size(), records);
  (void)flow.commit();
  if (flow.finish(sluice::Clock::now() + std::chrono::seconds(60)) != sluice::Status::kOk)
    throw sluice::Error(sluice::ErrorCode::kInternal, flow.error());
  return got;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"what sluice::ReplayFlow costs against a plain flow (a benchmark program)"};
  uint64_t records = 2000000;
  int rounds = 5, commit_ms = 20;
  app.add_option("--records", records, "records from every rank to every rank, per round")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds of each kind, alternating")
      ->check(CLI::PositiveNumber);
  app.add_option("--commit-ms", commit_ms, "ReplayFlow: commit() this often")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t n = cluster.world_size();
    std::vector<double> wall[2], cpu[2];
    for (int round = 0; round < 2 * rounds; ++round) {
      const int kind = round % 2;  // 0: plain, 1: replay
      auto spec = sluice::shuffle<Rec>("cost-" + std::to_string(round))
                      .sources(cluster.all_ranks())
                      .targets(cluster.all_ranks())
                      .explicit_targets();
      cluster.barrier("cost-start-" + std::to_string(round));
      const auto t0 = sluice::Clock::now();
      const double c0 = cpu_seconds();
      const uint64_t got = kind == 0 ? plain_round(cluster, spec, records)
                                     : replay_round(cluster, spec, records, commit_ms);
      const double secs = std::chrono::duration<double>(sluice::Clock::now() - t0).count();
      const double cpus = cpu_seconds() - c0;
      if (got != records * n)
        throw sluice::Error(sluice::ErrorCode::kInternal,
                            "round " + std::to_string(round) + ": consumed " + std::to_string(got));
      wall[kind].push_back(secs);
      cpu[kind].push_back(cpus);
      if (cluster.rank() == 0)
        std::printf("round %d %s: %.3f s wall, %.3f s CPU, %.1f M records/s in\n", round,
                    kind == 0 ? "plain " : "replay", secs, cpus,
                    static_cast<double>(got) / secs / 1e6);
    }
    if (cluster.rank() == 0)
      std::printf(
          "median plain %.3f s wall %.3f s CPU; replay %.3f s wall %.3f s CPU; "
          "replay/plain %.2f wall, %.2f CPU\n",
          median(wall[0]), median(cpu[0]), median(wall[1]), median(cpu[1]),
          median(wall[1]) / median(wall[0]), median(cpu[1]) / median(cpu[0]));
    (void)cluster.leave(sluice::Clock::now() + std::chrono::seconds(10));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-bench-replay-cost: %s\n", e.what());
    return 1;
  }
}
