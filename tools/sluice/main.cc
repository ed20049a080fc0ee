// The `sluice` command: launcher (run), standalone registry (registry) and
// version, which live in tools/common (commands.h); info and doctor, about
// this host (host_commands.h); `sluice perf` runs the benchmark program
// sluice-perf (bench/perf) found beside this one.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "host_commands.h"
#include "process.h"
#include "sluice/version.h"

namespace sluice::tool {
namespace {

constexpr const char* kPerfProgram = "sluice-perf";

// `sluice perf ARGS` is `sluice-perf ARGS`: the benchmarks are their own
// program, built with SLUICE_BUILD_BENCHMARKS and installed beside this one.
[[noreturn]] void exec_perf(int argc, char** argv) {
  std::string dir;
  try {
    const std::string self = proc::self_exe();
    dir = self.substr(0, self.rfind('/') + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice perf: cannot find the directory of sluice (%s) to run %s from\n",
                 e.what(), kPerfProgram);
    std::exit(127);
  }
  std::string perf = dir + kPerfProgram;
  std::vector<char*> args = {perf.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(perf.c_str(), args.data());
  const int e = errno;
  if (e == ENOENT) {
    std::fprintf(
        stderr,
        "sluice perf: runs the program %s, which was not built or installed beside sluice (%s does "
        "not exist); build it with `make perf` or `cmake --build build --target %s` (in a project "
        "that "
        "embeds sluice: -DSLUICE_BUILD_BENCHMARKS=ON)\n",
        kPerfProgram, perf.c_str(), kPerfProgram);
  } else {
    std::fprintf(stderr, "sluice perf: cannot run %s: %s\n", perf.c_str(), std::strerror(e));
  }
  std::exit(e == ENOENT ? 127 : 126);
}

void add_version_command(CLI::App& app) {
  CLI::App* sub =
      app.add_subcommand("version", "Print the sluice version and control-protocol version");
  sub->callback([] {
    std::printf("sluice %s (control protocol %u)\n", kVersion,
                static_cast<unsigned>(kProtocolVersion));
    // The library this command links is the one `make install` installs.
    std::printf("test hooks: %s\n", test_hooks_enabled() ? "on" : "off");
  });
}

// Listed in --help only: main() hands `sluice perf ...` to exec_perf before
// parsing, so that sluice-perf parses (and documents) its own options.
void add_perf_command(CLI::App& app) {
  app.add_subcommand("perf",
                     std::string("Benchmark flows against bounds and peers: runs ") + kPerfProgram +
                         " (beside sluice) with the same arguments; see `sluice perf --help`");
}

}  // namespace
}  // namespace sluice::tool

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "perf") sluice::tool::exec_perf(argc, argv);
  CLI::App app{"sluice: data flows between worker threads on many machines"};
  app.require_subcommand(1);
  app.footer("Run `sluice <command> --help` for the options of one command.");
  sluice::tool::add_run_command(app);
  sluice::tool::add_registry_command(app);
  sluice::tool::add_perf_command(app);
  sluice::tool::add_version_command(app);
  sluice::tool::add_info_command(app);
  sluice::tool::add_doctor_command(app);
  sluice::tool::add_top_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Subcommands report their own failures; reaching here is unexpected, so
    // say what escaped rather than letting terminate() print a bare abort.
    std::fprintf(stderr, "sluice: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
