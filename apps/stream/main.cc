// sluice-stream: a windowed streaming query (YSB, RO, CM or NEXMark) on
// generated data or files, run through the launcher:
//
//   sluice run -n 2 -- sluice-stream --query ysb --strategy slash --workers 2 --verify
//
// Every rank's workers ingest their own partitions, the engine
// (stream/engine.h) aggregates them with the chosen strategy, and rank 0
// prints throughput, window output latency, state size, bytes moved and
// late records, and with --verify whether a single-threaded reference on
// the same input agrees. The command line, exit statuses, worker pool and
// reports to rank 0 are the job harness's (sluice/job.h).
#include <sluice/job.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "command_run.h"
#include "options.h"
#include "stream/workloads.h"

namespace ss = sluice::stream;

int main(int argc, char** argv) {
  sluice::Job job(
      "sluice-stream",
      "A windowed streaming query (YSB, RO, CM, NEXMark) on generated data, every "
      "worker ingesting its own partition",
      sluice::kFlagJson | sluice::kFlagVerify | sluice::kFlagSeed | sluice::kFlagCluster);
  ss::Options opt;
  ss::add_options(job.cli(), job.flags(), opt);
  if (std::optional<int> status = job.parse(argc, argv)) return *status;
  // A restarted, spare or joining process takes a rank's place only where
  // the job recovers in place (--recover-within) or rescales (--elastic);
  // else it leaves at once.
  job.set_rejoin(opt.recover_within_s > 0 || opt.elastic);
  // --kafka-follow runs until stopped: a signal ends the input, not the job
  // (with --stop-with-savepoint: it stops the job at a savepoint).
  // (--elastic: it makes this rank leave at a savepoint.)
  if (opt.kafka_follow || opt.follow || !opt.input_socket.empty() || opt.stop_with_savepoint ||
      opt.elastic)
    sluice::enable_stop_signals();
  return job.run([&](sluice::JobContext& ctx) {
    const ss::WindowSpec window = ss::window_of(opt);
    const uint32_t workers = ctx.world_size() * opt.threads;
    // An elastic job on generated input deals it out by partitions: by
    // default one per worker of the job at its largest (every rank number).
    if (opt.elastic && opt.kafka_input.empty() && opt.partitions == 0) opt.partitions = workers;
    // (A worker without a partition would have no input: it would end its
    // input at once, and with it the job's checkpoints.)
    if (opt.partitions != 0 && opt.partitions < workers) {
      throw std::invalid_argument(
          "--partitions " + std::to_string(opt.partitions) + " is fewer than the job's " +
          std::to_string(workers) + " workers (SLUICE_WORLD_SIZE " +
          std::to_string(ctx.world_size()) + " x --workers " + std::to_string(opt.threads) +
          "): give at least one partition per worker of the job at its largest");
    }
    // Every worker of the job at its largest owns at least one key group.
    if (opt.key_groups < workers) {
      throw std::invalid_argument(
          "--key-groups " + std::to_string(opt.key_groups) + " is fewer than the job's " +
          std::to_string(workers) + " workers (SLUICE_WORLD_SIZE " +
          std::to_string(ctx.world_size()) + " x --workers " + std::to_string(opt.threads) +
          "): give at least one key group per worker of the job at its largest");
    }
    const bool first = ctx.cluster().incarnation(ctx.rank()) == 0;  // not a replacement
    // The directories are made if missing (as mkdir -p).
    const auto make_dir = [](const std::string& dir) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) throw std::runtime_error("cannot create the directory " + dir + ": " + ec.message());
    };
    if (!opt.input_csv_dir.empty() && ctx.rank() == 0 && first) {
      make_dir(opt.input_csv_dir);
      // (With --partitions, a file per partition: a job of P workers reads
      // them as this one reads its partitions.)
      ss::write_input_csv(opt.query, opt.gen, opt.partitions != 0 ? opt.partitions : workers,
                          opt.input_csv_dir);
    }
    if (!opt.input_binary_dir.empty() && ctx.rank() == 0 && first) {
      make_dir(opt.input_binary_dir);
      ss::write_input_binary(opt.query, opt.gen, opt.partitions != 0 ? opt.partitions : workers,
                             opt.input_binary_dir);
    }
    const bool workload = opt.query == "ysb" || opt.query == "ro" || opt.query == "cm";
    return workload ? ss::command::run_workload_query(opt, ctx, window)
                    : ss::command::run_nexmark_query(opt, ctx, window);
  });
}
