// The stream API in one program (docs/stream.md shows it; a test runs it):
// per-sensor temperature spread (max - min, a user-supplied mergeable
// aggregate) in 2 s windows sliding by 500 ms, from a user callable source,
// with rows to a callable sink; rank 0 checks the result against the
// single-threaded reference.   sluice run -n 2 -- sluice-stream-example
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "stream/engine.h"
#include "stream/reference.h"
#include "stream/sinks.h"

namespace ss = sluice::stream;

struct Reading {
  uint64_t sensor;
  int64_t time_ms;
  int64_t milli_celsius;
};

struct Spread {  // max - min: merges commutatively, so partial states combine in any order
  using Input = int64_t;
  struct State {
    int64_t lo, hi;
  };
  using Result = int64_t;
  State init() const { return {INT64_MAX, INT64_MIN}; }
  void add(State& s, Input v) const { s = {std::min(s.lo, v), std::max(s.hi, v)}; }
  void merge(State& s, const State& o) const { s = {std::min(s.lo, o.lo), std::max(s.hi, o.hi)}; }
  Result result(const State& s) const { return s.hi - s.lo; }
};

struct Totals {  // what each rank reports to rank 0
  uint64_t rows, checksum, readings;
};

int main(int argc, char** argv) {
  sluice::Job job("sluice-stream-example", "Temperature spread per sensor in sliding windows",
                  sluice::kFlagCluster);
  return job.main(argc, argv, [](sluice::JobContext& ctx) {
    // Each worker reads its own 200000 readings of 16 sensors, 20 per ms.
    auto readings = [](uint32_t worker, uint32_t) {
      return [worker, i = uint64_t{0}](std::span<Reading> out) mutable {
        size_t n = 0;
        for (const uint64_t h = sluice::hash64(worker); n < out.size() && i < 200000; ++n, ++i) {
          const uint64_t x = sluice::hash64(h + i);
          out[n] = {x % 16, static_cast<int64_t>(i / 20),
                    static_cast<int64_t>(x >> 40) % 40000 - 5000};
        }
        return n;
      };
    };
    auto query =
        ss::from<Reading>(readings)
            .filter([](const Reading& r) { return r.milli_celsius > -4000; })  // faulty readings
            .window(ss::WindowSpec::sliding(2000, 500), &Reading::time_ms)
            .key_by(&Reading::sensor)
            .aggregate(Spread{}, &Reading::milli_celsius);
    ss::EngineOptions options;
    options.threads = 2;
    ss::LockedSink sink([](const ss::Row<int64_t>& row) {
      if (row.key == 7 && row.start % 2000 == 0)
        std::printf("sensor 7, window [%" PRId64 ", %" PRId64 ") ms: spread %" PRId64 " m°C\n",
                    row.start, row.end, row.value);
    });
    const ss::Report mine = ss::run(ctx.cluster(), query, options, sink);
    if (mine.failure) return ctx.fail(*mine.failure);
    const auto all = ctx.gather("example", Totals{mine.rows, mine.checksum, mine.records_in});
    if (ctx.rank() != 0) return 0;
    Totals sum{};
    for (const Totals& t : all)
      sum = {sum.rows + t.rows, sum.checksum + t.checksum, sum.readings + t.readings};
    const auto ref = ss::reference(query, ctx.world_size() * options.threads, 0, 0);
    const bool ok = ref.rows.size() == sum.rows && ref.checksum() == sum.checksum;
    std::printf("example: %s (%" PRIu64 " rows from %" PRIu64 " readings; reference %zu rows)\n",
                ok ? "OK" : "MISMATCH", sum.rows, sum.readings, ref.rows.size());
    return ok ? 0 : 1;
  });
}
