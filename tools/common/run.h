// The launcher behind `sluice run`: one job on this host. It starts the job's
// registry in-process, starts N ranks of a program with SLUICE_RANK,
// SLUICE_WORLD_SIZE, SLUICE_REGISTRY and SLUICE_SECRET set, prefixes each
// line they print with "[<rank>] ", and waits for them.
//
// A rank that stops heart-beating to the registry (stopped with SIGSTOP, or
// hung so hard that its control thread is silent) for the peer timeout is
// killed with SIGKILL and counts as failed: the other ranks have already been
// told it is lost, and it must not keep the job alive.
//
// Failure policy: when a rank exits non-zero or is killed by a signal, the
// others get `grace` to notice the lost peer and exit on their own; then they
// get SIGTERM and, 2 s later, SIGKILL (with keep_going, they run on instead). SIGINT, SIGTERM and
// SIGHUP sent to the launcher are forwarded to every rank and then handled the same way (a second
// one kills the ranks at once). Every rank runs in its own process group, which is what the
// launcher signals, so helpers a rank started (e.g. under `sh -c`) are stopped with it; a rank dies
// with SIGKILL if the launcher itself dies.
//
// Thread safety: run_job blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP for the
// calling thread and ignores SIGPIPE; call it from the main thread before any
// other thread starts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::tool {

struct RunOptions {
  // Number of ranks; REQUIRES: >= 1.
  uint32_t ranks = 0;
  // The program (a path, or a name looked up in PATH) and its arguments.
  // REQUIRES: not empty.
  std::vector<std::string> command;
  // Kill the job if it runs longer than this; 0 means no limit (default).
  double timeout_seconds = 0;
  // After a rank fails, how long the others may take to exit on their own
  // before they get SIGTERM. Default 10 s.
  double grace_seconds = 10;
  // --keep-going: a rank that fails (exits non-zero, is killed, or is killed
  // for going silent) does not stop the others; they run on without it, as a
  // job whose ranks tolerate a lost peer wants (every flow with the rank
  // reports kPeerLost, Cluster::alive() turns false). The exit status still
  // names the first failure. Default off: the others get `grace`, then SIGTERM.
  bool keep_going = false;
  // --restarts K: a rank that fails (exits non-zero, is killed, or is
  // killed for going silent) is started again with the same SLUICE_RANK, up
  // to K times per rank, once the registry has reported the old process lost
  // (or 1 s passed). The new process rejoins the job as the rank's next
  // incarnation (Cluster::incarnation); the others run on meanwhile. A
  // failure that was restarted does not count against the exit status.
  // Default 0.
  uint32_t restarts = 0;
  // Address the registry binds and the ranks connect to. Default 127.0.0.1.
  std::string bind_host = "127.0.0.1";
  // Variables set for every rank on top of this process's environment (the
  // launcher's own SLUICE_RANK, SLUICE_WORLD_SIZE, SLUICE_REGISTRY and
  // SLUICE_SECRET win over these). Default none.
  std::map<std::string, std::string> env;
  // --stacks-on-timeout: when the job runs past timeout_seconds, print the
  // stack of every thread of every rank still running (gdb, as "thread apply
  // all bt") before stopping them, so that one hang in CI is enough to place
  // it. Default off: attaching gdb takes a second or two per rank.
  bool stacks_on_timeout = false;
  // --metrics HOST[:PORT]: the job's registry also serves the Prometheus
  // text format at http://HOST:PORT/metrics (port 0: any free port; the
  // address is printed). Empty (default): no metrics endpoint.
  std::string metrics;
  // --print-options: print_job_options() instead of run_job().
  bool print_options = false;
};

// Runs the job to completion and returns the launcher's exit status:
//   0        every rank exited 0;
//   S        the first rank that failed on its own exited with status S,
//   128+N    ... or was killed by signal N, or the launcher received signal N;
//   124      the job ran past timeout_seconds;
//   126/127  the program could not be executed / was not found;
//   1 or 2   the launcher itself could not start the job (message printed).
// Diagnostics go to stderr prefixed "sluice run: ".
int run_job(const RunOptions& options);

// `sluice run -n N --print-options`: prints ClusterOptions::describe() of the
// settings each of the N ranks would get from this environment (from_env(),
// the world size and a generated secret; rank and registry each rank reads at
// join), after validate(). Returns 0, or 2 with a message naming a malformed
// variable or field. Starts nothing.
int print_job_options(const RunOptions& options);

}  // namespace sluice::tool
