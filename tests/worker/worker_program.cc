// The Worker under `sluice run`, public API only. On every rank, thread 0 is
// one Worker with 3 inputs (flows a, b, c) and 2 outputs (flows a and b:
// every rank's thread 0 sends to every rank's thread 0, so each waits on the
// others); thread 1 feeds flow c. Rings are tiny, so every output is
// back-pressured most of the time and only the Worker's progress lets the
// job finish.
//
// Phases: (1) idle: every input is empty for --idle-ms; the worker thread's
// CPU time over that window must stay under --max-idle-cpu percent (it
// parks). (2) wake: only flow c gets data, in bursts with pauses between
// them; the parked worker must wake for it. (3) all at once: the worker
// pushes --records records into a and b while it consumes a, b and c.
// Checks: every record exactly once (counts and order-independent checksums
// per flow, summed over the job), per-source order at every target. Rank 0
// prints "VERIFIED ..." only if all of it holds; any failure prints FAILED.
//
// sluice-worker-test-program [--records N] [--burst-records N] [--bursts N] [--idle-ms M]
//                            [--max-idle-cpu P]
#include <sluice/sluice.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/job_args.h"

namespace {

struct Rec {
  uint64_t key;
  uint32_t src_rank;
  uint32_t seq;
};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Rec make(uint32_t flow, uint32_t rank, uint32_t seq) {
  return Rec{mix(uint64_t{flow} << 48 ^ uint64_t{rank} << 32 ^ seq), rank, seq};
}
uint64_t fingerprint(const Rec& r) { return mix(r.key ^ (uint64_t{r.src_rank} << 40) ^ r.seq); }

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// What one input received.
struct Tally {
  uint64_t count = 0;
  uint64_t sum = 0;
  std::vector<int64_t> last_seq;  // per source rank
  std::string problem;
  void add(std::span<const Rec> batch) {
    for (const Rec& r : batch) {
      ++count;
      sum += fingerprint(r);
      if (r.src_rank >= last_seq.size()) {
        if (problem.empty()) problem = "a record names source rank " + std::to_string(r.src_rank);
        continue;
      }
      if (static_cast<int64_t>(r.seq) <= last_seq[r.src_rank] && problem.empty()) {
        problem = "source rank " + std::to_string(r.src_rank) + ": record " +
                  std::to_string(r.seq) + " after record " + std::to_string(last_seq[r.src_rank]) +
                  " (per-source order broken)";
      }
      last_seq[r.src_rank] = r.seq;
    }
  }
};

struct Args {
  uint32_t records = 20000;
  uint32_t burst_records = 50;
  uint32_t bursts = 5;
  uint32_t idle_ms = 1000;
  double max_idle_cpu = 5.0;
  uint32_t segment_bytes = 256;  // flows a and b
  uint32_t ring_segments = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  sluice::testing::JobArgs(argc, argv,
                           "[--records N] [--burst-records N] [--bursts N] [--idle-ms M] "
                           "[--max-idle-cpu P] [--segment-bytes B] [--ring-segments S]")
      .value("--records", &a.records)
      .value("--burst-records", &a.burst_records)
      .value("--bursts", &a.bursts)
      .value("--idle-ms", &a.idle_ms)
      .value("--max-idle-cpu", &a.max_idle_cpu)
      .value("--segment-bytes", &a.segment_bytes)
      .value("--ring-segments", &a.ring_segments)
      .parse();
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  auto cluster = sluice::Cluster::join();
  const uint32_t rank = cluster.rank();
  const uint32_t world = cluster.world_size();

  // Tiny rings by default: two 256-byte segments (16 records each) per
  // pair. Large segments instead make close()'s last transfers outlast it.
  auto small = [&](const char* name, std::vector<sluice::Endpoint> sources, uint32_t bytes,
                   uint32_t segments) {
    return sluice::shuffle<Rec>(name)
        .sources(std::move(sources))
        .targets(cluster.all_ranks())
        .key(&Rec::key)
        .segment_bytes(bytes)
        .ring_segments(segments);
  };
  auto a = small("a", cluster.all_ranks(), args.segment_bytes, args.ring_segments);
  auto b = small("b", cluster.all_ranks(), args.segment_bytes, args.ring_segments);
  std::vector<sluice::Endpoint> feeders;
  for (uint32_t r = 0; r < world; ++r) feeders.push_back({r, 1});
  auto c = small("c", feeders, 256, 2);
  auto flow_a = cluster.declare(a);
  auto flow_b = cluster.declare(b);
  auto flow_c = cluster.declare(c);

  std::atomic<bool> feed{false};
  std::string feeder_error;
  const uint32_t c_records = args.burst_records * args.bursts;
  std::thread feeder([&] {
    auto out = cluster.source(c, 1);
    while (!feed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    uint32_t seq = 0;
    for (uint32_t burst = 0; burst < args.bursts; ++burst) {
      for (uint32_t i = 0; i < args.burst_records; ++i) {
        if (out.push(make(2, rank, seq++)) != sluice::Status::kOk) {
          feeder_error = "push to c: " + out.error();
          return;
        }
      }
      if (out.flush() != sluice::Status::kOk) {
        feeder_error = "flush c: " + out.error();
        return;
      }
      // A pause long enough for the worker to park before the next burst.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (out.close() != sluice::Status::kOk) feeder_error = "close c: " + out.error();
  });

  std::string failure;
  Tally tally[3];
  for (auto& t : tally) t.last_seq.assign(world, -1);
  sluice::Worker w;
  const auto ia =
      w.add(cluster.target(a, 0), [&](std::span<const Rec> batch) { tally[0].add(batch); });
  const auto ib =
      w.add(cluster.target(b, 0), [&](std::span<const Rec> batch) { tally[1].add(batch); });
  const auto ic =
      w.add(cluster.target(c, 0), [&](std::span<const Rec> batch, const sluice::BatchInfo& info) {
        if (feeders[info.source].rank != batch.front().src_rank && failure.empty()) {
          failure = "BatchInfo names source " + std::to_string(info.source) +
                    " for a batch from rank " + std::to_string(batch.front().src_rank);
        }
        tally[2].add(batch);
      });
  auto out_a = cluster.source(a, 0);
  auto out_b = cluster.source(b, 0);

  // (1) Idle: nothing is sent anywhere until every rank has measured.
  const auto wall0 = sluice::Clock::now();
  const double cpu0 = thread_cpu_seconds();
  const sluice::Status idle = w.run(wall0 + std::chrono::milliseconds(args.idle_ms));
  const double cpu = thread_cpu_seconds() - cpu0;
  const double wall = std::chrono::duration<double>(sluice::Clock::now() - wall0).count();
  const double percent = 100.0 * cpu / wall;
  std::printf("rank %u: idle %.0f ms with 3 empty inputs: %.2f%% of a CPU\n", rank, wall * 1e3,
              percent);
  if (idle != sluice::Status::kTimeout)
    failure = std::string("idle run(): ") + sluice::to_string(idle);
  if (percent > args.max_idle_cpu && failure.empty()) {
    failure = "an idle worker used " + std::to_string(percent) + "% of a CPU (limit " +
              std::to_string(args.max_idle_cpu) + "%)";
  }
  cluster.barrier("idle-measured");

  // (2) Wake: only c gets data, in bursts; the worker parks in between.
  feed.store(true);
  while (w.status(ic) == sluice::Status::kOk) w.idle(w.poll());
  if (w.status(ic) != sluice::Status::kEndOfFlow && failure.empty()) {
    failure = std::string("input c: ") + sluice::to_string(w.status(ic)) + ": " + w.error(ic);
  }

  // (3) All at once: push into a and b while consuming a, b (and c's end).
  for (uint32_t i = 0; i < args.records && failure.empty(); ++i) {
    if (w.push(out_a, make(0, rank, i)) != sluice::Status::kOk)
      failure = "push a: " + out_a.error();
    if (w.push(out_b, make(1, rank, i)) != sluice::Status::kOk)
      failure = "push b: " + out_b.error();
  }
  if (failure.empty() && w.close(out_a) != sluice::Status::kOk)
    failure = "close a: " + out_a.error();
  if (failure.empty() && w.close(out_b) != sluice::Status::kOk)
    failure = "close b: " + out_b.error();
  if (failure.empty()) {
    const sluice::Status s = w.run();
    if (s != sluice::Status::kEndOfFlow) {
      failure = std::string("run(): ") + sluice::to_string(s) + ": " + w.error(w.reported());
    }
  }
  feeder.join();
  if (!feeder_error.empty() && failure.empty()) failure = feeder_error;
  for (int f = 0; f < 3 && failure.empty(); ++f) {
    if (!tally[f].problem.empty())
      failure = std::string("flow ") + "abc"[f] + ": " + tally[f].problem;
  }
  (void)ia;
  (void)ib;

  // Exactly once, summed over the job.
  std::string mine = failure.empty() ? "ok" : "failed";
  for (const auto& t : tally)
    mine.append(" ").append(std::to_string(t.count)).append(" ").append(std::to_string(t.sum));
  const auto all = cluster.allgather("tallies", mine);
  if (cluster.leave() != sluice::Status::kOk) {
    std::printf("FAILED rank %u: leave() did not finish cleanly\n", rank);
    return 1;
  }
  if (!failure.empty()) {
    std::printf("FAILED rank %u: %s\n", rank, failure.c_str());
    return 1;
  }
  if (rank != 0) return 0;
  uint64_t count[3] = {}, sum[3] = {}, want_count[3] = {}, want_sum[3] = {};
  for (const auto& s : all) {
    char status[16];
    unsigned long long n[6];
    if (std::sscanf(s.c_str(), "%15s %llu %llu %llu %llu %llu %llu", status, &n[0], &n[1], &n[2],
                    &n[3], &n[4], &n[5]) != 7 ||
        std::strcmp(status, "ok") != 0) {
      std::printf("FAILED: a rank reported '%s'\n", s.c_str());
      return 1;
    }
    for (int f = 0; f < 3; ++f) {
      count[f] += n[2 * f];
      sum[f] += n[2 * f + 1];
    }
  }
  for (uint32_t r = 0; r < world; ++r) {
    for (int f = 0; f < 3; ++f) {
      const uint32_t n = f == 2 ? c_records : args.records;
      for (uint32_t i = 0; i < n; ++i) {
        ++want_count[f];
        want_sum[f] += fingerprint(make(static_cast<uint32_t>(f), r, i));
      }
    }
  }
  for (int f = 0; f < 3; ++f) {
    if (count[f] != want_count[f] || sum[f] != want_sum[f]) {
      std::printf(
          "FAILED: flow %c: %llu records (want %llu), checksum %llx (want %llx)\n", "abc"[f],
          static_cast<unsigned long long>(count[f]), static_cast<unsigned long long>(want_count[f]),
          static_cast<unsigned long long>(sum[f]), static_cast<unsigned long long>(want_sum[f]));
      return 1;
    }
  }
  std::printf(
      "VERIFIED %llu records over 3 inputs and 2 outputs per worker, exactly once, per-source "
      "order\n",
      static_cast<unsigned long long>(count[0] + count[1] + count[2]));
  return 0;
}
