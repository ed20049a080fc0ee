// A participant that gives a declared flow up without opening its ends (its
// DeclaredFlow destroyed at once, as a rank does that moves on to a new
// view): rank 1 does so; rank 0 opens its source and target and must learn
// at once that rank 1's will never be, rather than wait out its
// deadline. Prints, on rank 0, "CONSUME <status> after <ms> ms: <error>" and
// "PUSH <status> after <n> records, <ms> ms: <error>".
#include <sluice/sluice.h>

#include <chrono>
#include <cstdio>
#include <span>

int main() {
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    auto spec = sluice::shuffle<uint64_t>("abandoned")
                    .sources(cluster.all_ranks())
                    .targets(cluster.all_ranks())
                    .explicit_targets();
    sluice::DeclaredFlow flow = cluster.declare(spec);
    if (cluster.rank() != 0) {
      flow = {};  // given up: its ends here are never opened
      cluster.barrier("done");
      (void)cluster.leave();
      return 0;
    }
    auto since = [t0 = std::chrono::steady_clock::now()] {
      return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now() - t0)
                                        .count());
    };
    const auto deadline = [] { return sluice::Clock::now() + std::chrono::seconds(20); };
    {
      sluice::Target<uint64_t> target = cluster.target(spec, 0);
      sluice::Result<std::span<const uint64_t>> r = sluice::Status::kOk;
      while ((r = target.consume(deadline()))) {
      }
      std::printf("CONSUME %s after %lld ms: %s\n", sluice::to_string(r.status()), since(),
                  target.error().c_str());
    }
    {
      sluice::Source<uint64_t> source = cluster.source(spec, 0);
      sluice::Status st = sluice::Status::kOk;
      uint64_t pushed = 0;
      for (; st == sluice::Status::kOk && pushed < 100'000'000; ++pushed)
        st = source.push_to(1, pushed, deadline());
      std::printf("PUSH %s after %llu records, %lld ms: %s\n", sluice::to_string(st),
                  static_cast<unsigned long long>(pushed), since(), source.error().c_str());
    }
    std::fflush(stdout);
    flow = {};
    cluster.barrier("done");
    (void)cluster.leave();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}
