// The C++ side of bench/python/shuffle.py: the same job through the C++ API,
// so that the Python package's throughput is measured against a program that
// does exactly its work (docs/python.md, "Performance"). Every rank makes
// --records 16-byte records (key, value), key = i * world + rank, value 1,
// and shuffles them by key across the job, two ways:
//   exchange  one Worker per rank pushes every record and consumes at once
//             (no ring can fill against it), copying what arrives into one
//             vector, as Flow.exchange does; then sums the values;
//   ends      a thread pushes runs of --batch records (Source::push(span))
//             while the main thread consumes batches in place and sums each
//             batch's values, as shuffle.py's source thread and zero-copy
//             consume do.
// Rank 0 prints one JSON line per way with the same fields as shuffle.py's
// ("way" is cpp-exchange / cpp-ends): records per second of the whole job
// (wall, from a barrier to the last rank's end) and per CPU-second (every
// rank's process time summed). Run both in the same session:
//   build/bin/sluice run -n 2 -- build/bin/sluice-bench-python-baseline --records 10000000
//   PYTHONPATH=build/python build/bin/sluice run -n 2 -- .venv/bin/python
//       bench/python/shuffle.py --records 10000000   (one line)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/flow.h"
#include "sluice/worker.h"

namespace {

struct Rec {
  uint64_t key;
  uint64_t value;
};

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void check(sluice::Status s, const char* what, const std::string& error) {
  if (s != sluice::Status::kOk && s != sluice::Status::kEndOfFlow) {
    throw std::runtime_error(std::string(what) + ": " + sluice::to_string(s) + ": " + error);
  }
}

sluice::ShuffleSpec<Rec> spec_of(sluice::Cluster& c, const std::string& name,
                                 uint32_t segment_bytes) {
  auto spec = sluice::shuffle<Rec>(name)
                  .sources(c.all_ranks(1))
                  .targets(c.all_ranks(1))
                  .key(&Rec::key)
                  .type_tag("bench-rec");
  if (segment_bytes != 0) spec.segment_bytes(segment_bytes);
  return spec;
}

// Records received, their values' sum checked against the count.
uint64_t exchange(sluice::Cluster& c, const std::vector<Rec>& made, uint32_t segment_bytes) {
  auto spec = spec_of(c, "bench-exchange", segment_bytes);
  auto flow = c.declare(spec);
  std::vector<Rec> got;
  sluice::Worker w;
  w.add(c.target(spec, 0),
        [&](std::span<const Rec> batch) { got.insert(got.end(), batch.begin(), batch.end()); });
  auto& out = w.add_output(c.source(spec, 0));
  check(w.push(out, std::span<const Rec>(made)), "push", out.error());
  check(w.close(out), "close", out.error());
  check(w.run(), "run", w.error(w.reported()));
  uint64_t total = 0;
  for (const Rec& r : got) total += r.value;
  if (total != got.size()) throw std::runtime_error("exchange: the values do not add up");
  return got.size();
}

uint64_t ends(sluice::Cluster& c, const std::vector<Rec>& made, uint32_t segment_bytes,
              size_t batch) {
  auto spec = spec_of(c, "bench-ends", segment_bytes);
  auto flow = c.declare(spec);
  auto out = c.source(spec, 0);
  auto in = c.target(spec, 0);
  std::string push_error;
  std::thread pusher([&] {
    const std::span<const Rec> all(made);
    for (size_t i = 0; i < all.size() && push_error.empty(); i += batch) {
      const sluice::Status s = out.push(all.subspan(i, std::min(batch, all.size() - i)));
      if (s != sluice::Status::kOk) push_error = "push: " + out.error();
    }
    if (push_error.empty() && out.close() != sluice::Status::kOk)
      push_error = "close: " + out.error();
  });
  uint64_t n = 0, total = 0;
  auto b = in.consume();
  for (; b; b = in.consume()) {
    n += b->size();
    for (const Rec& r : *b) total += r.value;
  }
  pusher.join();
  if (!push_error.empty()) throw std::runtime_error(push_error);
  check(b.status(), "consume", in.error());
  if (total != n) throw std::runtime_error("ends: the values do not add up");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The C++ baseline of bench/python/shuffle.py (the same job through the C++ API)"};
  uint64_t records = 10'000'000;
  size_t batch = 65536;
  uint32_t segment_bytes = 0;
  app.add_option("--records", records, "records per rank")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "records per push (ends)")->check(CLI::PositiveNumber);
  app.add_option("--segment-bytes", segment_bytes, "segment payload (0: 8 KiB)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto c = sluice::Cluster::join();
    const uint32_t me = c.rank(), world = c.world_size();
    std::vector<Rec> made(records);
    for (uint64_t i = 0; i < records; ++i) made[i] = Rec{i * world + me, 1};
    const std::pair<const char*, std::function<uint64_t()>> ways[] = {
        {"cpp-exchange", [&] { return exchange(c, made, segment_bytes); }},
        {"cpp-ends", [&] { return ends(c, made, segment_bytes, batch); }}};
    for (const auto& [name, fn] : ways) {
      c.barrier(std::string(name) + "-start");
      const auto w0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      const uint64_t got = fn();
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      const double cpu = cpu_seconds() - c0;
      char line[128];
      std::snprintf(line, sizeof(line), "%.9f %.9f %" PRIu64, wall, cpu, got);
      double max_wall = 0, sum_cpu = 0;
      uint64_t sum_got = 0;
      for (const std::string& f : c.allgather(std::string(name) + "-facts", line)) {
        double fw = 0, fc = 0;
        unsigned long long fg = 0;
        if (std::sscanf(f.c_str(), "%lf %lf %llu", &fw, &fc, &fg) != 3) {
          throw std::runtime_error("a malformed report: " + f);
        }
        max_wall = std::max(max_wall, fw);
        sum_cpu += fc;
        sum_got += fg;
      }
      if (sum_got != records * world)
        throw std::runtime_error(std::string(name) + ": records lost");
      if (me == 0) {
        std::printf("{\"way\": \"%s\", \"ranks\": %u, \"segment_bytes\": %u, \"records\": %" PRIu64
                    ", \"record_bytes\": 16, \"seconds\": %.3f, \"records_per_s\": %.0f, "
                    "\"cpu_seconds\": %.3f, \"records_per_cpu_s\": %.0f}\n",
                    name, world, segment_bytes != 0 ? segment_bytes : 8192, sum_got, max_wall,
                    static_cast<double>(sum_got) / max_wall, sum_cpu,
                    static_cast<double>(sum_got) / sum_cpu);
        std::fflush(stdout);
      }
    }
    return c.leave() == sluice::Status::kOk ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-bench-python-baseline: %s\n", e.what());
    return 1;
  }
}
