// The job `system.top_test` watches with `sluice top`: every rank pushes
// --records 16-byte records through one shuffle flow
// to every rank, consumes its share, prints what it pushed and consumed, and
// then keeps its endpoints alive until the file --hold-until exists (or 60 s
// pass), so that the test can read their counters from outside. With
// --stall-rank R, rank R waits for that file before it closes its source,
// so every target stays open: the hang `sluice run` must report.
#include <sluice/sluice.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

struct Tick {
  uint64_t key;
  uint64_t value;
};

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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--records") == 0) records = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--hold-until") == 0) hold = argv[i + 1];
    if (std::strcmp(argv[i], "--stall-rank") == 0)
      stall_rank = std::strtol(argv[i + 1], nullptr, 10);
  }
  auto cluster = sluice::Cluster::join();
  auto spec = sluice::shuffle<Tick>("ticks")
                  .sources(cluster.all_ranks())
                  .targets(cluster.all_ranks())
                  .key(&Tick::key);
  auto flow = cluster.declare(spec);
  sluice::Worker worker;
  uint64_t consumed = 0;
  worker.add(cluster.target(spec, 0),
             [&](std::span<const Tick> batch) { consumed += batch.size(); });
  auto out = cluster.source(spec, 0);
  for (uint64_t i = 0; i < records; ++i) {
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
  // Hold the endpoints (the source, and the target inside the worker).
  wait_for(hold);
  return 0;
}
