// sluice-stream: a windowed streaming aggregation (YSB, RO or CM) on
// generated data, run through the launcher:
//
//   sluice run -n 2 -- sluice-stream --query ysb --strategy slash --workers 2 --verify
//
// Every rank's workers ingest their own partitions, the engine
// (stream/engine.h) aggregates them with the chosen strategy, and rank 0
// prints throughput, window output latency, state size, bytes moved and
// late records, and with --verify whether a single-threaded reference on
// the same input agrees.
#include <sluice/sluice.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "command_run.h"
#include "options.h"
#include "stream/workloads.h"

namespace ss = sluice::stream;

int main(int argc, char** argv) {
  const ss::Options opt = ss::parse_options(argc, argv);
  try {
    opt.gen.validate();
    const ss::WindowSpec window = ss::window_of(opt);
    window.validate();
    sluice::ClusterOptions options = sluice::ClusterOptions::from_env();
    // Every rank runs opt.threads busy workers: the library's spin budget
    // must count them (see apps/join/main.cc).
    options.threads_per_rank = std::max(1u, opt.threads);
    auto cluster = sluice::Cluster::join(options);
    if (!opt.input_csv_dir.empty() && cluster.rank() == 0) {
      ss::write_input_csv(opt.query, opt.gen, cluster.world_size() * opt.threads,
                          opt.input_csv_dir);
    }
    if (!opt.input_binary_dir.empty() && cluster.rank() == 0) {
      ss::write_input_binary(opt.query, opt.gen, cluster.world_size() * opt.threads,
                             opt.input_binary_dir);
    }
    const bool workload = opt.query == "ysb" || opt.query == "ro" || opt.query == "cm";
    return workload ? ss::command::run_workload_query(opt, cluster, window)
                    : ss::command::run_nexmark_query(opt, cluster, window);
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "sluice-stream: %s\n", e.what());
    return e.code() == sluice::ErrorCode::kBootstrap ? 3 : 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "sluice-stream: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-stream: %s\n", e.what());
    return 1;
  }
}
