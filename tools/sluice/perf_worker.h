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
// --segment-bytes / --ring-segments set the flow's geometry (0: defaults).
// FILE "-" means stdout (for ranks started by hand, e.g. in a namespace).
//
//   sluice perf-worker --sources 1 --targets 1 --rep I --latency N --out FILE
//
// instead bounces one 64 B record between ranks 0 and 1 through two
// Optimize::kLatency flows N times (after N/10+10 warm-up round trips) and
// rank 0 appends {"kind": "latency", "rtt_us_median", "rtt_us_p99",
// "rtt_us_min", "round_trips", "seconds", "cpu_seconds", ...}.
//
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool::perf {

void add_perf_worker_command(CLI::App& app);

}  // namespace sluice::tool::perf
