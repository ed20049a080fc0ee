// The options and the sweep of sluice-perf (perf.cc), registered on the
// program's top-level command line: `sluice-perf [OPTIONS]`, which is what
// `sluice perf [OPTIONS]` runs.
//
// Exit status: the callback throws CLI::RuntimeError(status) after printing
// its own message when a job fails.
// Thread safety: register from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool {

void add_perf_options(CLI::App& app);

}  // namespace sluice::tool
