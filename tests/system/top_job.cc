// The job `system.top_test` watches with `sluice top`: every rank pushes
// --records 16-byte records through one shuffle flow (--flow, "ticks" by
// default)
// to every rank, consumes its share, prints what it pushed and consumed, and
// then keeps its endpoints alive until the file --hold-until exists (or 60 s
// pass), so that the test can read their counters from outside. With
// --stall-rank R, rank R waits for that file before it closes its source,
// so every target stays open: the hang `sluice run` must report.
// With --region-ops N, rank 0 also exposes a region "tally" and every rank
// adds 1 to its first word N times through its own handle (kept open until
// the end): the region counters; with --ordered N, every rank pushes N
// records into an ordered replicate flow "seq" that every rank consumes:
// the sequencer counters. With --records 0, every rank pushes until the
// --hold-until file exists (a job that runs until the test lets it end).
#include <sluice/sluice.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>

namespace {

struct Tick {
  uint64_t key;
  uint64_t value;
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Until `path` exists (at most 60 s); at once if it is empty.
void wait_for(const std::string& path) {
  struct stat st {};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!path.empty() && ::stat(path.c_str(), &st) != 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  uint64_t records = 100000;
  std::string hold;
  long stall_rank = -1;
  uint64_t region_ops = 0;
  uint64_t ordered = 0;
  std::string flow_name = "ticks";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--records") == 0) records = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--hold-until") == 0) hold = argv[i + 1];
    if (std::strcmp(argv[i], "--stall-rank") == 0)
      stall_rank = std::strtol(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--region-ops") == 0)
      region_ops = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--ordered") == 0) ordered = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--flow") == 0) flow_name = argv[i + 1];
  }
  auto cluster = sluice::Cluster::join();
  auto spec = sluice::shuffle<Tick>(flow_name)
                  .sources(cluster.all_ranks())
                  .targets(cluster.all_ranks())
                  .key(&Tick::key);
  auto flow = cluster.declare(spec);
  // Declared before the worker, which holds the flow's target.
  std::optional<sluice::DeclaredFlow> seq_flow;
  sluice::Worker worker;
  uint64_t consumed = 0;
  worker.add(cluster.target(spec, 0),
             [&](std::span<const Tick> batch) { consumed += batch.size(); });
  auto out = cluster.source(spec, 0);

  // The region and its handle live until the end (destroyed in reverse:
  // the handle first, after every rank's last barrier).
  sluice::MemoryRegion tally;
  sluice::RemoteRegion handle;
  if (region_ops != 0) {
    if (cluster.rank() == 0) tally = cluster.expose("tally", 4096);
    cluster.barrier("tally-exposed");
    handle = cluster.open_region("tally", 0);
    for (uint64_t i = 0; i < region_ops; ++i) {
      if (!handle.fetch_add(0, 1)) {
        std::fprintf(stderr, "fetch_add: %s\n", handle.error().c_str());
        return 1;
      }
    }
    cluster.barrier("tally-added");
    uint64_t total = 0;
    if (handle.read(0, std::as_writable_bytes(std::span(&total, 1))) != sluice::Status::kOk) {
      std::fprintf(stderr, "read: %s\n", handle.error().c_str());
      return 1;
    }
    std::printf("rank %u tally %llu\n", cluster.rank(), static_cast<unsigned long long>(total));
  }
  std::optional<sluice::Source<Tick>> seq_out;
  uint64_t seq_consumed = 0;
  if (ordered != 0) {
    auto seq = sluice::replicate<Tick>("seq")
                   .sources(cluster.all_ranks())
                   .targets(cluster.all_ranks())
                   .ordered();
    seq_flow.emplace(cluster.declare(seq));
    worker.add(cluster.target(seq, 0),
               [&](std::span<const Tick> batch) { seq_consumed += batch.size(); });
    seq_out.emplace(cluster.source(seq, 0));
    for (uint64_t i = 0; i < ordered; ++i) {
      if (worker.push(*seq_out, Tick{i, cluster.rank()}) != sluice::Status::kOk) {
        std::fprintf(stderr, "push seq: %s\n", seq_out->error().c_str());
        return 1;
      }
    }
    if (worker.close(*seq_out) != sluice::Status::kOk) {
      std::fprintf(stderr, "close seq: %s\n", seq_out->error().c_str());
      return 1;
    }
  }
  const bool until_hold = records == 0 && !hold.empty();
  for (uint64_t i = 0; until_hold || i < records; ++i) {
    if (until_hold && i % 4096 == 0 && exists(hold)) {
      records = i;
      break;
    }
    if (worker.push(out, Tick{i * cluster.world_size() + cluster.rank(), i}) !=
        sluice::Status::kOk) {
      std::fprintf(stderr, "push: %s\n", out.error().c_str());
      return 1;
    }
  }
  if (stall_rank == static_cast<long>(cluster.rank())) {
    std::printf("rank %u stalls before close\n", cluster.rank());
    wait_for(hold);
  }
  if (worker.close(out) != sluice::Status::kOk) {
    std::fprintf(stderr, "close: %s\n", out.error().c_str());
    return 1;
  }
  if (worker.run() != sluice::Status::kEndOfFlow) {
    std::fprintf(stderr, "run: %s\n", worker.error(0).c_str());
    return 1;
  }
  std::printf("rank %u pushed %llu consumed %llu\n", cluster.rank(),
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(consumed));
  if (ordered != 0) {
    std::printf("rank %u seq consumed %llu\n", cluster.rank(),
                static_cast<unsigned long long>(seq_consumed));
  }
  // Hold the endpoints (the source, and the target inside the worker).
  wait_for(hold);
  // No handle outlives the region it reaches.
  if (region_ops != 0) cluster.barrier("tally-done");
  return cluster.leave() == sluice::Status::kOk ? 0 : 1;
}
