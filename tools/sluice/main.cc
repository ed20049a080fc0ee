// The `sluice` command: launcher (run), standalone registry (registry),
// benchmarks (perf) and version. Each subcommand lives in its own file and is
// registered through commands.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "common/test_hooks.h"
#include "sluice/version.h"

namespace sluice::tool {

void add_version_command(CLI::App& app) {
  CLI::App* sub =
      app.add_subcommand("version", "Print the sluice version and control-protocol version");
  sub->callback([] {
    std::printf("sluice %s (control protocol %u)\n", kVersion,
                static_cast<unsigned>(kProtocolVersion));
    // The library this command links is the one `make install` installs.
    std::printf("test hooks: %s\n", sluice::detail::test_hooks::enabled() ? "on" : "off");
  });
}

}  // namespace sluice::tool

int main(int argc, char** argv) {
  CLI::App app{"sluice: data flows between worker threads on many machines"};
  app.require_subcommand(1);
  app.footer("Run `sluice <command> --help` for the options of one command.");
  sluice::tool::add_run_command(app);
  sluice::tool::add_registry_command(app);
  sluice::tool::add_perf_command(app);
  sluice::tool::add_version_command(app);
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
