// The `sluice` subcommands about this host rather than one job: `sluice info`
// (info.cc) and `sluice doctor` (doctor.cc), both built on host_facts.h, and
// `sluice top` (top.cc).
// Only the sluice command hosts them (tools/common holds what sluice-perf
// shares).
//
// Thread safety: call these from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool {

// `sluice info [--registry HOST:PORT] [--json]`: host identity, memory and
// limits, interfaces, and every libfabric provider as a rank opens it.
void add_info_command(CLI::App& app);

// `sluice doctor [--registry HOST:PORT] [--hosts N] [--ranks-per-host N]
// [--shm-mib M] [--ofi-provider P] [--json]`: preflight checks, each with its
// fix; exit status 1 if any fails.
void add_doctor_command(CLI::App& app);

// `sluice top [--once] [--json] [--interval S] [--iterations N] [--pid P]`
// (top.cc): every sluice process's flow endpoints on this host, from their
// counters areas.
void add_top_command(CLI::App& app);

}  // namespace sluice::tool
