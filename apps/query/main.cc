// sluice-query: the parallel query engine's command, run through the launcher:
//
//   sluice run -n 4 -- sluice-query synthetic --threads 2 --rows 5000000
//
// Every process runs the plan with --threads workers; rank 0 sums what the
// processes report, checks it against a single-process computation and
// prints the result ("verify: OK", or MISMATCH and exit status 1). The
// command line, exit statuses, worker pools and reports to rank 0 are the
// job harness's (sluice/job.h).
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "options.h"
#include "synthetic.h"
#include "tpcc.h"
#include "tpcc_queries.h"

namespace sq = sluice::query;

namespace {

// What every rank reports to rank 0 of a synthetic run (ctx.gather).
struct SyntheticReport {
  uint64_t count, checksum, shuffled_1, shuffled_2, bytes;
  double seconds;
};

std::string transport_label(sluice::JobContext& ctx, sq::ExchangeImpl impl) {
  if (impl == sq::ExchangeImpl::kSockets) return "tcp";
  if (impl == sq::ExchangeImpl::kNone) return "none";
  return ctx.transport_label();
}

int synthetic(const sq::Options& opt, sluice::JobContext& ctx) {
  const uint32_t rank = ctx.rank(), world = ctx.world_size();
  const uint32_t threads = ctx.flags().threads;
  std::optional<sq::SyntheticResult> reference;  // rank 0, after the first run
  bool all_ok = true;
  for (size_t run = 0; run < opt.batch_bytes.size(); ++run) {
    sq::SyntheticConfig config;
    config.rows = opt.rows;
    config.runtime.threads = threads;
    config.runtime.batch_bytes = opt.batch_bytes[run];
    config.runtime.ring_segments = opt.ring_segments;
    config.runtime.impl = opt.exchange;
    config.name = "synthetic." + std::to_string(run);
    config.on_start = [rank, name = config.name] {
      std::fprintf(stderr, "sluice-query: rank %u: %s running\n", rank, name.c_str());
    };
    const sq::SyntheticResult mine = sq::run_synthetic(ctx.cluster(), config);
    if (mine.failure) return ctx.fail("query failed: " + mine.failure->describe());
    const std::vector<SyntheticReport> all =
        ctx.gather(config.name + ".result",
                   SyntheticReport{mine.count, mine.checksum, mine.rows_shuffled_1,
                                   mine.rows_shuffled_2, mine.bytes_moved, mine.seconds});
    if (rank != 0) continue;
    if (!reference) reference = sq::synthetic_reference(opt.rows, world);
    SyntheticReport sum{};
    for (const SyntheticReport& w : all) {
      sum.count += w.count;
      sum.checksum += w.checksum;
      sum.shuffled_1 += w.shuffled_1;
      sum.shuffled_2 += w.shuffled_2;
      sum.bytes += w.bytes;
      sum.seconds = std::max(sum.seconds, w.seconds);
    }
    // Exactly once: both exchanges delivered every row once, and the
    // result equals the single-process computation.
    // (With no exchange, nothing is exchanged and the result is the same.)
    const uint64_t exchanged = opt.exchange == sq::ExchangeImpl::kNone ? 0 : reference->count;
    const bool ok = sum.count == reference->count && sum.checksum == reference->checksum &&
                    sum.shuffled_1 == exchanged && sum.shuffled_2 == exchanged;
    all_ok = all_ok && ok;
    const std::string transport = transport_label(ctx, opt.exchange);
    const double rows = static_cast<double>(opt.rows) * world;
    if (ctx.flags().json) {
      std::printf(
          "{\"program\":\"sluice-query\",\"query\":\"synthetic\",\"exchange\":\"%s\","
          "\"transport\":\"%s\",\"processes\":%u,\"threads\":%u,\"rows_per_process\":%" PRIu64
          ",\"batch_bytes\":%u,\"count\":%" PRIu64 ",\"checksum\":\"%016" PRIx64
          "\",\"reference_count\":%" PRIu64 ",\"reference_checksum\":\"%016" PRIx64
          "\",\"rows_exchanged\":%" PRIu64 ",\"bytes_exchanged\":%" PRIu64
          ",\"seconds\":%.6f,\"rows_per_s\":%.0f,\"verify\":\"%s\"}\n",
          sq::to_string(opt.exchange), transport.c_str(), world, threads, opt.rows,
          opt.batch_bytes[run], sum.count, sum.checksum, reference->count, reference->checksum,
          sum.shuffled_1 + sum.shuffled_2, sum.bytes, sum.seconds,
          rows / std::max(sum.seconds, 1e-9), ok ? "OK" : "MISMATCH");
    } else {
      const std::string how = opt.exchange == sq::ExchangeImpl::kNone
                                  ? std::string("no exchange (compute only)")
                                  : std::string(sq::to_string(opt.exchange))
                                        .append(" exchange over ")
                                        .append(transport);
      std::printf("sluice-query synthetic: %u processes x %u workers, %s, batches of %u bytes\n",
                  world, threads, how.c_str(), opt.batch_bytes[run]);
      std::printf("  rows      %" PRIu64 " per process, %" PRIu64 " in all; exchanged %" PRIu64
                  " + %" PRIu64 " rows, %.1f MB\n",
                  opt.rows, reference->count, sum.shuffled_1, sum.shuffled_2, sum.bytes / 1e6);
      std::printf("  result    count %" PRIu64 ", checksum %016" PRIx64 "\n", sum.count,
                  sum.checksum);
      std::printf("  time      %.3f s (slowest worker), %.1f M rows/s generated\n", sum.seconds,
                  rows / std::max(sum.seconds, 1e-9) / 1e6);
    }
    if (ok) {
      std::printf("verify: OK (count %" PRIu64 ", checksum %016" PRIx64
                  " equal to the single-process computation)\n",
                  sum.count, sum.checksum);
    } else {
      std::printf("verify: MISMATCH: count %" PRIu64 ", checksum %016" PRIx64 ", exchanged %" PRIu64
                  " + %" PRIu64 "; reference count %" PRIu64 ", checksum %016" PRIx64 "\n",
                  sum.count, sum.checksum, sum.shuffled_1, sum.shuffled_2, reference->count,
                  reference->checksum);
    }
    std::fflush(stdout);
  }
  return all_ok ? 0 : 1;
}

// What every rank reports of a TPC-C run, per exchange.
constexpr size_t kMaxExchanges = 8;
struct TpccReport {
  uint64_t rows[kMaxExchanges], bytes[kMaxExchanges];
  double ended[kMaxExchanges];
  double seconds, generate_seconds;
};

int tpcc(const sq::Options& opt, sluice::JobContext& ctx) {
  const uint32_t rank = ctx.rank(), world = ctx.world_size();
  const uint32_t threads = ctx.flags().threads;
  sq::TpccConfig config;
  config.query = opt.query;
  config.warehouses = opt.warehouses;
  config.seed = ctx.flags().seed;
  config.every_amount = opt.every_amount;
  config.input_dir = opt.input;
  config.runtime.threads = threads;
  config.runtime.batch_bytes = opt.batch_bytes.front();
  config.runtime.ring_segments = opt.ring_segments;
  config.runtime.impl = opt.exchange;
  const sq::TpccResult r = sq::run_tpcc(ctx.cluster(), config);
  if (r.failure) return ctx.fail("query failed: " + r.failure->describe());
  TpccReport mine{};
  const size_t nx = std::min(kMaxExchanges, r.exchanges.size());
  for (size_t i = 0; i < nx; ++i) {
    mine.rows[i] = r.exchanges[i].stats.rows_received;
    mine.bytes[i] = r.exchanges[i].stats.bytes_received;
    mine.ended[i] = r.exchanges[i].stats.ended_seconds;
  }
  mine.seconds = r.seconds;
  mine.generate_seconds = r.generate_seconds;
  const std::vector<TpccReport> all = ctx.gather("tpcc.report", mine);
  if (rank != 0) return 0;
  TpccReport sum{};
  for (const TpccReport& w : all) {
    for (size_t i = 0; i < nx; ++i) {
      sum.rows[i] += w.rows[i];
      sum.bytes[i] += w.bytes[i];
      sum.ended[i] = std::max(sum.ended[i], w.ended[i]);
    }
    sum.seconds = std::max(sum.seconds, w.seconds);
    sum.generate_seconds = std::max(sum.generate_seconds, w.generate_seconds);
  }
  const std::string transport = transport_label(ctx, opt.exchange);
  std::string header;
  for (const auto& f : r.rows.schema().fields()) header += (header.empty() ? "" : ",") + f.name;
  if (ctx.flags().json) {
    std::string xs;
    for (size_t i = 0; i < nx; ++i) {
      xs += (i ? ",{" : "{") + std::string("\"name\":\"") + r.exchanges[i].name +
            "\",\"rows\":" + std::to_string(sum.rows[i]) +
            ",\"bytes\":" + std::to_string(sum.bytes[i]) +
            ",\"done_s\":" + std::to_string(sum.ended[i]) + "}";
    }
    std::printf(
        "{\"program\":\"sluice-query\",\"query\":\"tpcc-%s\",\"exchange\":\"%s\","
        "\"transport\":\"%s\",\"processes\":%u,\"threads\":%u,\"warehouses\":%u,"
        "\"input\":\"%s\","
        "\"batch_bytes\":%u,\"result_rows\":%zu,\"seconds\":%.6f,"
        "\"generate_seconds\":%.3f,\"exchanges\":[%s]}\n",
        opt.query.c_str(), sq::to_string(opt.exchange), transport.c_str(), world, threads,
        opt.input.empty() ? opt.warehouses : 0, opt.input.c_str(), config.runtime.batch_bytes,
        r.rows.rows(), sum.seconds, sum.generate_seconds, xs.c_str());
  } else {
    const std::string data = opt.input.empty() ? std::to_string(opt.warehouses) + " warehouses"
                                               : "tables from " + opt.input;
    std::printf("sluice-query tpcc %s: %s, %u processes x %u workers, %s exchange over %s\n",
                opt.query.c_str(), data.c_str(), world, threads, sq::to_string(opt.exchange),
                transport.c_str());
    std::printf("  time      %.3f s (slowest worker; %s the tables took %.3f s before)\n",
                sum.seconds, opt.input.empty() ? "generating" : "reading", sum.generate_seconds);
    for (size_t i = 0; i < nx; ++i) {
      std::printf("  exchange  %s: %" PRIu64 " rows, %" PRIu64 " bytes, stage done after %.3f s\n",
                  r.exchanges[i].name.c_str(), sum.rows[i], sum.bytes[i], sum.ended[i]);
    }
  }
  std::printf("columns: %s\n", header.c_str());
  std::string text = r.rows.to_text(',');
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    std::printf("row: %s\n", text.substr(start, nl - start).c_str());
    start = nl + 1;
  }
  std::fflush(stdout);
  return 0;
}

// Writes the whole generated database (one process) as CSV with a header.
int tpcc_export(const sq::Options& opt, uint64_t seed) {
  const sq::TpccTables t = sq::generate_tpcc(opt.warehouses, 0, 1, seed, opt.every_amount);
  for (const auto& [path, rows] : sq::write_tpcc_csv(opt.dir, t)) {
    std::printf("%s: %zu rows\n", path.c_str(), rows);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job(
      "sluice-query", "A parallel query engine on sluice flows (docs/query.md)",
      sluice::kFlagThreads | sluice::kFlagJson | sluice::kFlagSeed | sluice::kFlagCluster);
  sq::Options opt;
  sq::add_options(job.cli(), opt);
  if (std::optional<int> status = job.parse(argc, argv)) return *status;
  if (opt.command == "tpcc-export") {
    return job.run_local([&] { return tpcc_export(opt, job.flags().seed); });
  }
  return job.run([&](sluice::JobContext& ctx) {
    return opt.command == "tpcc" ? tpcc(opt, ctx) : synthetic(opt, ctx);
  });
}
