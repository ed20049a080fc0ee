// The rank side of `sluice perf`: a hidden subcommand of sluice-perf that it
// launches (through run_job, or by hand in network namespaces) as every rank
// of a flow job.
//
//   sluice-perf worker --mode bandwidth --sources S --targets T --sizes 8,64 --rep I
//                      [--bytes N] [--round-trips N] [--segment-bytes N]
//                      [--ring-segments N] --out FILE|-
//
// Ranks 0..S-1 are sources, S..S+T-1 targets (one endpoint each). For every
// size it runs the mode (perf_mode.h) on every rank, gathers the ranks'
// parts through allgather, and rank 0 merges them into one sample and appends
// it as one JSON line to FILE (stdout for "-"):
//   {"mode", "record_bytes", "rep", "records", "seconds", "cpu_seconds",
//    "src_cpu_seconds", "tgt_cpu_seconds", ...mode-specific fields}
// A failure (lost records, a lost peer) exits 1 after one message.
//
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool::perf {

void add_perf_worker_command(CLI::App& app);

}  // namespace sluice::tool::perf
