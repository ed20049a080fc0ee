// What the per-endpoint counters (src/observe/endpoint_counters.h) cost the
// data path, counted in instructions rather than timed: one rank pushes
// --records 16-byte records into a flow whose source and target are both its
// own, on one thread (try_push until the ring is full, then drain it), so
// the instruction count of the loop is the same on every run, whatever else
// the machine does. measure.sh runs it under callgrind in a build with
// counters and one without (-DSLUICE_COUNTERS=OFF) and prints the ratio.
// --latency publishes every record in a segment of its own (Latency mode),
// where counters cost the most per record.
//
//   sluice run -n 1 -- sluice-counters-cost --records 2000000 [--latency]
#include <sluice/sluice.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct Rec {
  uint64_t key;
  uint64_t value;
};

// Kept out of line: callgrind counts instructions inside this function only
// (--toggle-collect), not start-up or the control thread.
[[gnu::noinline]] uint64_t run_loop(sluice::Source<Rec>& out, sluice::Target<Rec>& in,
                                    uint64_t records, uint64_t* sum) {
  uint64_t consumed = 0;
  const auto drain = [&] {
    while (auto batch = in.try_consume()) {
      for (const Rec& r : *batch) *sum += r.value;
      consumed += batch->size();
    }
  };
  for (uint64_t i = 0; i < records; ++i) {
    const Rec r{i, i * 7};
    sluice::Status s;
    while ((s = out.try_push(r)) == sluice::Status::kWouldBlock) drain();
    if (s != sluice::Status::kOk) {
      std::fprintf(stderr, "push: %s\n", out.error().c_str());
      std::exit(1);
    }
  }
  // One thread both ends: close() may need ring room only draining frees,
  // so it is retried with a deadline already past, draining in between.
  sluice::Status closed;
  while ((closed = out.close(sluice::Clock::now())) == sluice::Status::kTimeout) drain();
  if (closed != sluice::Status::kOk) {
    std::fprintf(stderr, "close: %s\n", out.error().c_str());
    std::exit(1);
  }
  while (auto batch = in.consume()) {
    for (const Rec& r : *batch) *sum += r.value;
    consumed += batch->size();
  }
  return consumed;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t records = 1000000;
  bool latency = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--records") == 0 && i + 1 < argc) {
      records = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--latency") == 0) {
      latency = true;
    } else {
      std::fprintf(stderr,
                   "usage: sluice run -n 1 -- sluice-counters-cost [--records N] [--latency]\n");
      return 2;
    }
  }
  auto cluster = sluice::Cluster::join();
  if (cluster.world_size() != 1) {
    std::fprintf(stderr, "sluice-counters-cost runs as one rank (sluice run -n 1)\n");
    return 2;
  }
  auto spec = sluice::shuffle<Rec>("cost")
                  .sources(cluster.all_ranks())
                  .targets(cluster.all_ranks())
                  .key(&Rec::key);
  if (latency) spec.optimize(sluice::Optimize::kLatency);
  auto flow = cluster.declare(spec);
  auto in = cluster.target(spec, 0);
  auto out = cluster.source(spec, 0);
  uint64_t sum = 0;
  const uint64_t consumed = run_loop(out, in, records, &sum);
  const uint64_t want = 7 * (records * (records - 1) / 2);
  std::printf("records %llu consumed %llu checksum %s\n", static_cast<unsigned long long>(records),
              static_cast<unsigned long long>(consumed),
              consumed == records && sum == want ? "ok" : "WRONG");
  const bool left = cluster.leave() == sluice::Status::kOk;
  return consumed == records && sum == want && left ? 0 : 1;
}
