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
// Fault injection from outside (--kill, --stop): the launcher itself kills
// or stops a rank's process group at a time counted from the moment the job
// started, i.e. every rank's first incarnation joined the job's registry, so
// that no rank is told in advance which rank fails or when. A job whose ranks
// never all join (a program that does not use the registry) is never
// injected a fault; the launcher says so at the end.
//
// Thread safety: run_job blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP for the
// calling thread and ignores SIGPIPE; call it from the main thread before any
// other thread starts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tool {

// One fault the launcher injects into a running job (RunOptions::faults).
struct Fault {
  enum class Kind {
    kKill,   // --kill RANK@SECONDS: SIGKILL to the rank's process group
    kStop,   // --stop RANK@SECONDS:DURATION: SIGSTOP, then SIGCONT DURATION s later
    kLeave,  // --leave RANK@SECONDS: SIGTERM (not a fault: a program that leaves the job on
             // it, e.g. sluice-stream --elastic, scales the job down)
  };
  Kind kind = Kind::kKill;
  // The rank whose process (group) gets the signal, whichever incarnation of
  // it runs at the time. REQUIRES: < RunOptions::ranks (run_job checks).
  uint32_t rank = 0;
  // Seconds after the job started (every rank joined); finite, >= 0.
  double at_seconds = 0;
  // kStop: seconds the rank stays stopped, finite, > 0; 0 for kKill.
  double duration_seconds = 0;
  // "RANK@SECONDS after TEXT": SECONDS count from the first line a rank
  // prints, once the faults' clock has started, that contains TEXT (a phase
  // the program announces, e.g. "flow 'stream-e1' started"), instead of from
  // the faults' clock itself. Empty (default): from the clock.
  std::string after;
};

// Parses the value of --kill or --leave ("RANK@SECONDS", e.g. "2@1.5") or --stop
// ("RANK@SECONDS:DURATION", e.g. "1@0.3:0.5"), either followed by
// " after TEXT" (Fault::after, TEXT not empty): RANK a decimal number,
// SECONDS a finite number >= 0, DURATION a finite number > 0; nothing else
// (no sign, no other spaces). On a malformed value returns nullopt and sets *error
// to a message naming the option and the value, e.g. "--kill '2': expected
// RANK@SECONDS (e.g. 2@1.5), found no '@'". Whether RANK exists in the job
// is run_job's to check.
std::optional<Fault> parse_fault(Fault::Kind kind, std::string_view text, std::string* error);

// "--kill 2@1.5", "--stop 1@0.3:0.5": the option that gives `fault`.
std::string fault_text(const Fault& fault);

// A deterministic crash (--kill-at RANK:NAME[:K]): the rank's first process
// kills itself the K-th time it passes sluice::kill_point("NAME")
// (sluice/job.h); the launcher arms it through SLUICE_TEST_KILL_AT.
struct KillAt {
  uint32_t rank = 0;
  std::string name;  // [A-Za-z0-9._-]+
  uint64_t pass = 1;
};

// Parses --kill-at's value ("1:kv-after-accept" or "1:kv-after-accept:40");
// nullopt and *error naming the option and the value when malformed.
std::optional<KillAt> parse_kill_at(std::string_view text, std::string* error);

// A number of seconds as the launcher's messages write it ("%g": 1.5, 10).
std::string seconds_text(double seconds);

struct RunOptions {
  // Number of ranks; REQUIRES: >= 1.
  uint32_t ranks = 0;
  // --max-ranks M: an elastic job's rank numbers, M >= ranks (0: ranks, not
  // elastic). Ranks ranks..M-1 start as vacancies (no process, in no view);
  // a process that joins the running job (--join, or SLUICE_JOIN=1 from
  // anywhere with the job's registry and secret) takes the lowest vacancy
  // or the number of a rank that left, as its next incarnation, and every
  // member sees a new view with it. Every rank gets SLUICE_WORLD_SIZE=M.
  uint32_t max_ranks = 0;
  // --join SECONDS (repeatable): start one more process of the program,
  // with SLUICE_JOIN=1, SECONDS after the job started (the faults' clock:
  // every rank joined, or --faults-after's line); it joins as a new member
  // (max_ranks). Default none.
  std::vector<double> joins;
  // The job's rank numbers: max_ranks, or ranks when it is 0.
  uint32_t rank_numbers() const { return max_ranks > ranks ? max_ranks : ranks; }
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
  // --spares K: K more processes of the program start with the ranks, with
  // SLUICE_SPARE=1 instead of SLUICE_RANK: each waits in Cluster::join
  // until a rank dies (fails, is killed, or is declared lost for silence),
  // and then joins in its place as that rank's next incarnation (as a
  // restarted process would, without the start-up). A failure a spare made
  // up for does not count against the exit status; a rank whose failure no
  // spare takes is handled by --restarts and --keep-going as before. With
  // --restarts, a spare that took a rank's place is replaced by a new one,
  // as a restart of that rank (its restarts, the rate and the delay). Spares
  // no rank needed get SIGTERM once every rank exited. Default 0.
  uint32_t spares = 0;
  // --restart-delay S: the first restart of a rank waits at least S seconds
  // after its failure, each further one of the same rank twice as long as
  // the one before (exponential backoff, as Flink's exponential-delay
  // strategy), at most restart_delay_max_seconds. Default 0: at once.
  double restart_delay_seconds = 0;
  double restart_delay_max_seconds = 60;
  // --max-restart-rate N/S: at most N restarts (of any ranks) within any S
  // seconds (Flink's failure-rate strategy); a failure beyond that is not
  // restarted but handled as without --restarts. 0 (default): no limit.
  uint32_t rate_restarts = 0;
  double rate_seconds = 0;
  // Address the registry binds and the ranks connect to. Default 127.0.0.1.
  std::string bind_host = "127.0.0.1";
  // Variables set for every rank on top of this process's environment (the
  // launcher's own SLUICE_RANK, SLUICE_WORLD_SIZE, SLUICE_REGISTRY and
  // SLUICE_SECRET win over these). Default none.
  std::map<std::string, std::string> env;
  // --stacks-on-timeout: when the job runs past timeout_seconds, or ranks
  // outlive another's failure by the grace period, print the
  // stack of every thread of every rank still running (gdb, as "thread apply
  // all bt") before stopping them, so that one hang in CI is enough to place
  // it. Default off: attaching gdb takes a second or two per rank.
  bool stacks_on_timeout = false;
  // --metrics HOST[:PORT]: the job's registry also serves the Prometheus
  // text format at http://HOST:PORT/metrics (port 0: any free port; the
  // address is printed). Empty (default): no metrics endpoint.
  std::string metrics;
  // --kill RANK@SECONDS (repeatable): SIGKILL to the rank's process group
  // SECONDS after the job started (every rank joined its registry).
  // --stop RANK@SECONDS:DURATION (repeatable): SIGSTOP to it then, and
  // SIGCONT DURATION seconds later if it still runs. A fault that comes due
  // while its rank is not running (it exited, or waits to be restarted) or
  // while the launcher is already stopping the job is skipped with a
  // message. A rank killed by --kill is a failed rank like any other for
  // the failure policy (grace, keep_going, restarts: it is started again),
  // but its own death does not count against the exit status, which is 0
  // if every other rank (and every restarted incarnation) exits 0; ranks
  // the launcher then has to stop after `grace` do count (128+N if the
  // signal kills them). A rank stopped past the peer timeout stops
  // heart-beating and is killed as a silent rank: that is a failure of its
  // own and counts. Default none.
  std::vector<Fault> faults;
  // --kill-at RANK:NAME[:K] (repeatable, one per rank): rank RANK's first
  // process (not a restarted or spare one) gets SLUICE_TEST_KILL_AT=NAME:K
  // and kills itself at that pass of kill_point("NAME"). Its death is an
  // injected one, as --kill's. Default none.
  std::vector<KillAt> kill_at;
  // --faults-after TEXT: the faults' SECONDS count from the first line any
  // rank prints (stdout or stderr) that contains TEXT, instead of from when
  // every rank joined; so a test can land a fault inside a phase of the job
  // that the program announces to its users ("aggregation started") while
  // no rank is told of the fault. Empty (default): from the join.
  std::string faults_after;
  // --print-options: print_job_options() instead of run_job().
  bool print_options = false;
};

// Runs the job to completion and returns the launcher's exit status:
//   0        every rank exited 0 (a rank killed by an injected --kill
//            aside);
//   S        the first rank that failed on its own exited with status S,
//   128+N    ... or was killed by signal N, or the launcher received signal N;
//   124      the job ran past timeout_seconds;
//   126/127  the program could not be executed / was not found;
//   1 or 2   the launcher itself could not start the job (message printed;
//            2: a bad option, e.g. a fault naming a rank the job lacks).
// Diagnostics go to stderr prefixed "sluice run: ".
int run_job(const RunOptions& options);

// Checks the faults of `options` against the job (a rank it lacks, a time
// or duration out of range, --faults-after without a fault): "" if they
// are fine, else the message, naming the option.
std::string check_faults(const RunOptions& options);

// Now, as CLOCK_REALTIME seconds with microseconds ("1796236451.123456"),
// so that an injected fault can be placed among the ranks' own logs.
std::string realtime_text();

// `sluice run -n N --print-options`: prints ClusterOptions::describe() of the
// settings each of the N ranks would get from this environment (from_env(),
// the world size and a generated secret; rank and registry each rank reads at
// join), after validate(). Returns 0, or 2 with a message naming a malformed
// variable or field. Starts nothing.
int print_job_options(const RunOptions& options);

}  // namespace sluice::tool
