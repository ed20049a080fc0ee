// `sluice run`'s command line (CLI11): the options of RunOptions (run.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "commands.h"
#include "run.h"
#include "tool_util.h"

namespace sluice::tool {

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* sub =
      app.add_subcommand("run", "Start a job on this host: a registry and N ranks of a program");
  sub->footer(
      "Usage: sluice run -n N [--timeout S [--stacks-on-timeout]] [--grace S | --keep-going]\n"
      "                       [--restarts K] [--kill RANK@S]... [--stop RANK@S:D]...\n"
      "                       [--faults-after TEXT]\n"
      "                       [--bind HOST] [--metrics HOST:PORT] -- PROGRAM [ARGS...]\n"
      "       sluice run -n N --print-options\n"
      "Injected faults (--kill, --stop) count from when every rank has joined the job's\n"
      "registry (never, for a program that does not join), or with --faults-after from the\n"
      "first line a rank prints that contains TEXT. A rank killed by --kill fails as\n"
      "if it had crashed (--grace, --keep-going, --restarts apply), but its own death does not\n"
      "count against the exit status: it is 0 if every other rank exits 0.");
  // Everything after the program name belongs to the program, even when it
  // looks like an option, so `--` is optional.
  sub->positionals_at_end();
  sub->add_option("-n,--ranks", options->ranks, "Number of ranks to start (at least 1)")
      ->required();
  sub->add_option(
      "--timeout", options->timeout_seconds,
      "Kill the job and exit 124 if it runs longer than this many seconds (default 0: no limit)");
  sub->add_option("--grace", options->grace_seconds,
                  "After a rank fails, seconds the others get to exit on their own before SIGTERM")
      ->capture_default_str();
  sub->add_flag("--keep-going", options->keep_going,
                "A rank that fails does not stop the others: they run on without it (for "
                "programs that tolerate a lost rank); the exit status still names the failure");
  sub->add_option("--restarts", options->restarts,
                  "Start a rank that fails again, up to this many times per rank; it rejoins the "
                  "job as a new process (Cluster::incarnation), and the others run on meanwhile")
      ->capture_default_str();
  auto kills = std::make_shared<std::vector<std::string>>();
  auto stops = std::make_shared<std::vector<std::string>>();
  sub->add_option("--kill", *kills,
                  "SIGKILL rank RANK (its process group) SECONDS s after every rank joined the "
                  "job's registry (repeatable). A failure like a crash for --grace, --keep-going "
                  "and --restarts, but its own death does not count against the exit status")
      ->allow_extra_args(false)
      ->type_name("RANK@SECONDS");
  sub->add_option("--stop", *stops,
                  "SIGSTOP rank RANK (its process group) SECONDS s after every rank joined the "
                  "job's registry, and SIGCONT it DURATION s later (repeatable). Stopped past the "
                  "peer timeout (SLUICE_PEER_TIMEOUT_MS), it is killed as a silent rank, which "
                  "counts as a failure")
      ->allow_extra_args(false)
      ->type_name("RANK@SECONDS:DURATION");
  sub->add_option("--faults-after", options->faults_after,
                  "--kill and --stop count from the first line a rank prints (stdout or stderr) "
                  "that contains TEXT, instead of from when every rank joined: a fault lands in a "
                  "phase the program announces, and no rank is told of it")
      ->type_name("TEXT");
  sub->add_option("--bind", options->bind_host, "Address the job's registry listens on")
      ->capture_default_str();
  sub->add_option("--metrics", options->metrics,
                  "[HOST:]PORT: serve the job's flow counters and rank states in the Prometheus "
                  "text format at http://HOST:PORT/metrics while it runs (PORT 0 or none: any "
                  "free port, printed)");
  sub->add_flag("--stacks-on-timeout", options->stacks_on_timeout,
                "When --timeout passes, print the stack of every thread of every rank still "
                "running (needs gdb) before stopping them");
  sub->add_flag("--print-options", options->print_options,
                "Print the settings (ClusterOptions::describe()) each rank would get from this "
                "environment, checked as join() checks them, and exit without starting anything");
  sub->add_option("command", options->command, "The program each rank runs, and its arguments");
  sub->callback([options, kills, stops] {
    for (const auto& [kind, texts] :
         {std::pair{Fault::Kind::kKill, kills.get()}, std::pair{Fault::Kind::kStop, stops.get()}}) {
      for (const std::string& text : *texts) {
        std::string error;
        std::optional<Fault> fault = parse_fault(kind, text, &error);
        if (!fault) {
          // (one write, as the launcher's own messages)
          const std::string line = "sluice run: " + error + "\n";
          (void)write_all(STDERR_FILENO, line);
          throw CLI::RuntimeError(2);
        }
        options->faults.push_back(*fault);
      }
    }
    int status = options->print_options ? print_job_options(*options) : run_job(*options);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace sluice::tool
