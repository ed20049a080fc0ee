// The rank side of `sluice perf`: a hidden subcommand that `sluice perf`
// launches (through run_job) as every rank of a flow benchmark job.
//
//   sluice perf-worker --sources S --targets T --sizes 16,64 --rep I
//                      --bytes N --out FILE
//
// Ranks 0..S-1 are sources, S..S+T-1 targets (one endpoint each). For every
// size it declares a fresh flow, meets the others at a barrier, moves N bytes
// of records per source, checks that every record arrived exactly once
// (counts and key checksums, compared through allgather) and rank 0 appends
// one JSON line per measurement to FILE:
//   {"record_bytes", "rep", "records", "seconds", "cpu_seconds",
//    "source_seconds", "target_seconds": [...]}
// "seconds" is the slowest target's time from the barrier to end-of-flow.
//
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool::perf {

void add_perf_worker_command(CLI::App& app);

}  // namespace sluice::tool::perf
