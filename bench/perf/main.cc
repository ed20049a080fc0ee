// sluice-perf: the project's perftest, its own program beside the library
// (as leveldb's db_bench is); `sluice perf ARGS` runs `sluice-perf ARGS`.
//
//   sluice-perf [OPTIONS]         the sweep (perf.h; docs/benchmarks.md)
//   sluice-perf worker ...        one rank of a flow job (perf_worker.h)
//   sluice-perf tcp ...           one end of the kernel TCP peer (perf_tcp.h)
//   sluice-perf registry ...      the job registry, in a network namespace
//
// The last three are what the sweep starts (this same program); they are
// not listed in --help.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string_view>

#include "commands.h"
#include "perf.h"
#include "perf_tcp.h"
#include "perf_worker.h"

int main(int argc, char** argv) {
  const std::string_view first = argc > 1 ? argv[1] : "";
  CLI::App app{""};
  app.name("sluice-perf");
  if (first == "worker" || first == "tcp" || first == "registry") {
    app.require_subcommand(1);
    sluice::tool::perf::add_perf_worker_command(app);
    sluice::tool::perf::add_perf_tcp_command(app);
    sluice::tool::add_registry_command(app);
  } else {
    sluice::tool::add_perf_options(app);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-perf: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
