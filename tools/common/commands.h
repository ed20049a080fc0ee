// The subcommands of the `sluice` tool that other programs host too (the
// launcher and the standalone registry, which `sluice-perf` starts in network
// namespaces). Each add_<name>_command registers one subcommand (its options
// and its callback) on a CLI11 app; tools/sluice/main.cc calls them all.
//
// Exit status: a callback that returns normally exits 0. To exit with another
// status it throws CLI::RuntimeError(status) after printing its own message;
// CLI11 passes that status through without printing anything more.
//
// Thread safety: call these from the main thread before App::parse.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::tool {

// `sluice run -n N [--timeout S] [--grace S] [--bind HOST] [--metrics HOST:PORT] -- prog args...`
// (run.cc): starts a registry in-process and N ranks of prog;
// `sluice run -n N --print-options` prints the settings the ranks would get.
void add_run_command(CLI::App& app);

// `sluice registry --bind HOST[:PORT] --world N [--secret-file F] [--metrics HOST:PORT]`
// (registry.cc): a standalone registry for jobs that span hosts; the secret
// comes from F, SLUICE_SECRET or is generated (--secret S still works, with
// a warning: a command line is readable by every user).
void add_registry_command(CLI::App& app);

}  // namespace sluice::tool
