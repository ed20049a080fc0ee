// sluice-join: a distributed join of two relations R and S on a 64-bit key,
// run through the launcher:
//
//   sluice run -n 4 -- sluice-join --algorithm radix --threads 1 --r 4000000 --s 4000000 --verify
//
// Every rank generates (or loads) its fragment of R and S, the ranks join
// them with the radix hash join or the fragment-and-replicate join (see
// distributed_join.h), and rank 0 prints the match count, an
// order-independent checksum of the result, timings per phase and, with
// --verify, whether a single-process reference join of the same data agrees.
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "data.h"
#include "distributed_join.h"
#include "local_join.h"
#include "options.h"

namespace sj = sluice::join;

namespace {

// What every rank reports to rank 0 (JobContext::gather, after the join).
struct Report {
  uint64_t matches, checksum, bytes_in, bytes_remote, arena_blocks_added, fanout_bits;
  double seconds, cpu_seconds, partition, network, build, probe;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

template <class T>
int run(sluice::JobContext& ctx, const sj::Options& opt) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = ctx.rank(), world = ctx.world_size();
  const uint32_t threads = ctx.flags().threads;
  const sj::DataSpec& data = opt.data;

  // This rank's fragments (setup: not timed).
  auto [r_local, s_local] = sj::local_fragments<T>(data, rank, world, threads);
  uint64_t r_total = data.r_tuples, s_total = data.s_tuples;
  if (data.from_files()) {
    r_total = s_total = 0;
    const auto sizes = cluster.allgather(
        "join-sizes", std::to_string(r_local.size()) + " " + std::to_string(s_local.size()));
    for (const auto& s : sizes) {
      unsigned long long r = 0, q = 0;
      std::sscanf(s.c_str(), "%llu %llu", &r, &q);
      r_total += r;
      s_total += q;
    }
  }
  if (!opt.save_r.empty()) sj::save_fragment(opt.save_r, rank, r_local);
  if (!opt.save_s.empty()) sj::save_fragment(opt.save_s, rank, s_local);
  auto split = [&](const std::vector<T>& rows) {
    std::vector<std::span<const T>> parts;
    for (uint32_t t = 0; t < threads; ++t) {
      const uint64_t b = sj::part_begin(rows.size(), threads, t);
      const uint64_t e = sj::part_begin(rows.size(), threads, t + 1);
      parts.emplace_back(rows.data() + b, e - b);
    }
    return parts;
  };

  const sj::AlgorithmChoice choice = sj::choose_algorithm(opt.algorithm, r_total, s_total, world);
  sj::JoinConfig config;
  config.algorithm = choice.algorithm;
  config.threads = threads;
  config.segment_bytes = opt.segment_bytes;
  config.ring_segments = opt.ring_segments;

  const sj::RankReport report =
      sj::run_join<T>(cluster, config, split(r_local), split(s_local), r_total, s_total);
  if (!report.error.empty()) return ctx.fail("join failed: " + report.error);

  const Report mine{
      report.result.matches,     report.result.checksum, report.bytes_in,     report.bytes_remote,
      report.arena_blocks_added, report.fanout_bits,     report.seconds,      report.cpu_seconds,
      report.phases.partition,   report.phases.network,  report.phases.build, report.phases.probe,
  };
  const std::vector<Report> all = ctx.gather("join-result", mine);
  if (rank != 0) return 0;

  sj::JoinResult total;
  Report sum{};
  double slowest = 0;
  for (const Report& w : all) {
    total.add(sj::JoinResult{w.matches, w.checksum});
    sum.bytes_in += w.bytes_in;
    sum.bytes_remote += w.bytes_remote;
    sum.arena_blocks_added += w.arena_blocks_added;
    sum.cpu_seconds += w.cpu_seconds;
    sum.partition += w.partition;
    sum.network += w.network;
    sum.build += w.build;
    sum.probe += w.probe;
    slowest = std::max(slowest, w.seconds);
  }
  const double workers = static_cast<double>(world) * threads;
  const double tuples = static_cast<double>(r_total + s_total);
  const std::string transport_name = ctx.transport_label();
  const char* transport = transport_name.c_str();
  std::string verdict = "skipped";
  sj::JoinResult reference;
  double reference_seconds = 0;
  if (ctx.flags().verify) {
    const auto all_rows = sj::whole_relations<T>(data, world, threads);
    const auto t0 = sluice::Clock::now();
    reference = sj::hash_join<T>(all_rows.r, all_rows.s);
    reference_seconds = std::chrono::duration<double>(sluice::Clock::now() - t0).count();
    verdict = reference == total ? "OK" : "MISMATCH";
  }

  if (ctx.flags().json) {
    std::printf(
        "{\"program\":\"sluice-join\",\"algorithm\":\"%s\",\"why\":\"%s\",\"ranks\":%u,\"threads\":"
        "%u,"
        "\"transport\":\"%s\",\"width\":%u,\"r\":%" PRIu64 ",\"s\":%" PRIu64
        ",\"dist\":\"%s\",\"theta\":%.3f,"
        "\"r_keys\":\"%s\",\"domain\":%" PRIu64 ",\"selectivity\":%.3f,\"seed\":%" PRIu64
        ",\"matches\":%" PRIu64 ",\"checksum\":\"%016" PRIx64
        "\",\"seconds\":%.6f,\"cpu_seconds\":%.3f,\"tuples_per_s\":%.0f,"
        "\"bytes_moved\":%" PRIu64 ",\"bytes_remote\":%" PRIu64
        ",\"phases_mean_per_worker\":{\"partition\":%.6f,"
        "\"network\":%.6f,\"build\":%.6f,\"probe\":%.6f},\"fanout_bits\":%" PRIu64
        ",\"verify\":\"%s\"}\n",
        sj::to_string(choice.algorithm), json_escape(choice.why).c_str(), world, threads, transport,
        data.width, r_total, s_total, sj::to_string(data.dist), data.theta,
        sj::to_string(data.r_keys), data.effective_domain(), data.selectivity, data.seed,
        total.matches, total.checksum, slowest, sum.cpu_seconds, tuples / std::max(slowest, 1e-9),
        sum.bytes_in, sum.bytes_remote, sum.partition / workers, sum.network / workers,
        sum.build / workers, sum.probe / workers, all[0].fanout_bits, verdict.c_str());
  } else {
    std::printf("sluice-join: %s join, %u ranks x %u threads over %s\n",
                choice.algorithm == sj::Algorithm::kRadix ? "radix hash" : "fragment-and-replicate",
                world, threads, transport);
    std::printf("  data      %s\n", data.describe().c_str());
    std::printf("  choice    %s\n", choice.why.c_str());
    std::printf("  result    %" PRIu64 " matches, checksum %016" PRIx64 "\n", total.matches,
                total.checksum);
    std::printf(
        "  time      %.3f s (slowest rank), %.1f M tuples/s of |R|+|S|, %.2f CPU-seconds in all\n",
        slowest, tuples / std::max(slowest, 1e-9) / 1e6, sum.cpu_seconds);
    std::printf(
        "  phases    partition %.3f s, network %.3f s, build %.3f s, probe %.3f s (mean per worker "
        "thread)\n",
        sum.partition / workers, sum.network / workers, sum.build / workers, sum.probe / workers);
    std::printf("  moved     %.1f MB through flows, %.1f MB of it between ranks; %" PRIu64
                " sub-partition bits per worker\n",
                sum.bytes_in / 1e6, sum.bytes_remote / 1e6, all[0].fanout_bits);
    if (sum.arena_blocks_added != 0) {
      std::printf("  skew      partition buffers outgrew their estimate %" PRIu64 " times\n",
                  sum.arena_blocks_added);
    }
  }
  if (ctx.flags().verify) {
    if (verdict == "OK") {
      std::printf("verify: OK (%" PRIu64 " matches, checksum %016" PRIx64
                  " equal to a single-process reference hash join, which took %.3f s)\n",
                  total.matches, total.checksum, reference_seconds);
    } else {
      std::printf("verify: MISMATCH: distributed %" PRIu64 " matches, checksum %016" PRIx64
                  "; reference %" PRIu64 " matches, checksum %016" PRIx64 "\n",
                  total.matches, total.checksum, reference.matches, reference.checksum);
    }
  }
  std::fflush(stdout);
  return verdict == "MISMATCH" ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job(
      "sluice-join", "Joins R and S on a 64-bit key across the ranks x --threads workers",
      sluice::kFlagThreads | sluice::kFlagJson | sluice::kFlagVerify | sluice::kFlagCluster);
  sj::Options opt;
  sj::add_join_options(job.cli(), opt);
  return job.main(argc, argv, [&](sluice::JobContext& ctx) {
    return opt.data.width == 8 ? run<sj::Tuple8>(ctx, opt) : run<sj::Tuple16>(ctx, opt);
  });
}
