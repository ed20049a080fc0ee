/// @file
/// sluice/job.h: the harness a job's command shares with every other: its
/// command line, its main(), its worker threads and its report to rank 0.
///
/// @code
///   int main(int argc, char** argv) {
///     sluice::Job job("sluice-count", "counts records across the ranks");
///     uint64_t records = 1000;
///     job.cli().add_option("--records", records, "records per worker");  // CLI11
///     return job.main(argc, argv, [&](sluice::JobContext& ctx) {
///       sluice::PoolReport run = ctx.run_workers([&](uint32_t thread, sluice::StartLine& start) {
///         ... declare flows, open this thread's ends ...
///         start.wait();  // every worker of every rank is set up: the clock starts
///         ... push and consume ...
///       });
///       if (run.failure) return ctx.fail(*run.failure);
///       auto all = ctx.gather("count-report", Report{...});  // rank 0 gets every rank's
///       if (ctx.rank() == 0) ... print ...
///       return 0;
///     });
///   }
/// @endcode
///
/// Job parses the standard flags (JobFlags: `--threads`, `--transport`, `--json`,
/// `--verify`, `--seed`, `--setup-timeout-ms`, `--peer-timeout-ms`) and the program's
/// own, which it adds to cli() (a CLI::App of CLI11: include <CLI/CLI.hpp> in
/// the file that adds them). It joins the Cluster with
/// ClusterOptions::from_env() overridden by those flags, runs the body, and
/// turns what the body returns or throws into the exit status:
/// @code{.unparsed}
///   0  the body returned 0 (or --help was asked);
///   1  the job failed while it ran (a lost peer, a failed flow, a wrong
///      result the body reported), or the body returned 1;
///   2  bad usage: an unknown or malformed flag, or UsageError /
///      std::invalid_argument / Error(kInvalidArgument) from the body;
///   3  the process could not join the job (Error(kBootstrap));
///   any other value the body returns, as it is.
/// @endcode
/// Every message it prints goes to stderr as "<name>: rank R: <what>".
///
/// Fault injection is not the program's business: `sluice run --kill
/// RANK@SECONDS` and `--stop RANK@SECONDS:DURATION` do it from outside, so no
/// rank learns which rank will fail or when; `--kill-at RANK:NAME[:K]` kills
/// a rank at a place the program marked with kill_point("NAME").
///
/// Thread safety: Job is used by main()'s thread. A JobContext may be used by
/// the body's thread; run_workers' threads use only the StartLine they get
/// (and the Cluster, which is thread-safe).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sluice/cluster.h"
#include "sluice/errors.h"
#include "sluice/options.h"

namespace CLI {
class App;
}

namespace sluice {

/// Thrown by a program (or its option checks) for input it cannot use: a
/// file that does not parse, a flag value out of range. Exit status 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The flags every job command shares. Set defaults before Job::parse (e.g.
/// job.flags().threads = 2); read the parsed values after.
struct JobFlags {
  /// `--threads`: worker threads per rank (run_workers starts this many).
  /// 1..1024; default 1. Also sets ClusterOptions::threads_per_rank.
  uint32_t threads = 1;
  /// `--transport` auto|shm|ofi: overrides SLUICE_TRANSPORT. Default: the
  /// environment's (auto).
  std::optional<Transport> transport;
  /// `--json`: rank 0 prints its report as one JSON object. Default off.
  bool json = false;
  /// `--verify`: check the result against a reference. Default off.
  bool verify = false;
  /// `--seed`: for generated input. Default 1.
  uint64_t seed = 1;
  /// `--setup-timeout-ms`, `--peer-timeout-ms`: override SLUICE_SETUP_TIMEOUT_MS
  /// and SLUICE_PEER_TIMEOUT_MS. Default: the environment's.
  ///@{
  std::optional<uint32_t> setup_timeout_ms;
  std::optional<uint32_t> peer_timeout_ms;
  ///@}
};

/// Which standard flags a program offers (a program without a reference to
/// check against does not offer `--verify`). Bits of JobFlagSet.
enum JobFlag : uint32_t {
  kFlagThreads = 1u << 0,  ///< `--threads`
  kFlagJson = 1u << 1,     ///< `--json`
  kFlagVerify = 1u << 2,   ///< `--verify`
  kFlagSeed = 1u << 3,     ///< `--seed`
  /// `--transport`, `--setup-timeout-ms` and `--peer-timeout-ms`.
  kFlagCluster = 1u << 4,
  /// All of them (Job's default).
  kStandardFlags = kFlagThreads | kFlagJson | kFlagVerify | kFlagSeed | kFlagCluster,
};
/// JobFlag bits or-ed together.
using JobFlagSet = uint32_t;

/// Why a rank's job failed, as run_workers (or the body) found it: the root
/// cause, not the echoes. When a peer was lost, lost_peer names it and
/// `message` is what the first worker that saw it said; otherwise the first
/// failure of any worker.
struct JobFailure {
  std::string message;                ///< what the worker said (see above)
  std::optional<LostPeer> lost_peer;  ///< the peer that was lost, if one was
  /// "rank 2 (host-b) was lost: <message>" or just the message.
  std::string describe() const;
};

/// What run_workers measured. Times run from the moment every worker of every
/// rank passed StartLine::wait() to the end of this rank's last worker.
struct PoolReport {
  double seconds = 0;      ///< wall time of this rank's workers
  double cpu_seconds = 0;  ///< CPU time of this process (all threads) meanwhile
  /// The root cause if the start or a worker failed (see run_workers);
  /// empty if none did.
  std::optional<JobFailure> failure;
  /// The ranks whose workers started together, increasing: every member, or
  /// with PoolOptions::start_without_lost those still alive at the start;
  /// empty if the start failed.
  std::vector<uint32_t> started;
};

/// The line every worker of every rank starts from: set up first (declare
/// flows, open ends), then wait(), then work. A worker that returns or throws
/// without calling wait() counts as having arrived.
class StartLine {
 public:
  /// Blocks until every worker of this rank has arrived and every rank's
  /// workers have met at a barrier. Throws if the start was called off (a
  /// worker of this rank failed in its set-up, or the barrier failed): let it
  /// propagate, run_workers does not count it as a cause.
  void wait();

  struct State;
  /// run_workers makes one per worker, on its private State.
  explicit StartLine(State& state) : state_(&state) {}
  /// Whether this worker has called wait().
  bool arrived() const { return arrived_; }

 private:
  State* state_;
  bool arrived_ = false;
};

/// How run_workers starts its threads.
struct PoolOptions {
  /// Worker threads on this rank. REQUIRES: >= 1. Default 1.
  uint32_t threads = 1;
  /// The start barrier's name: the same on every rank, different for each
  /// call. Default "job-start".
  std::string name = "job-start";
  /// The ranks that start together, as endpoints (rank, 0) (Cluster::ranks):
  /// empty (default) for every rank of the job. REQUIRES: names this rank.
  std::vector<Endpoint> members;
  /// What a member lost before the start does (it died, stopped
  /// heart-beating or left: Cluster::alive). false (default): the start
  /// fails on every member, naming it. true: the others start without it
  /// (meet_survivors; PoolReport::started says who), for work that does not
  /// need every member, e.g. clients of a store that recovers a lost
  /// client's work.
  bool start_without_lost = false;
  /// With start_without_lost: each member takes part in the start as this
  /// incarnation (Cluster::incarnation; indexed by rank, world_size
  /// entries; meet_survivors), e.g. all 0 for the job's first processes, so
  /// that a member that died and was started again before the start is
  /// left out instead of waited for. Empty (default): as each is when the
  /// call begins. The report's root cause counts a member that is no longer
  /// that incarnation as lost.
  std::vector<uint32_t> incarnations;
};

/// Runs work(thread, start) on options.threads threads of this rank and waits
/// for them; every rank of options.members calls it. The threads start
/// together (StartLine); the report times them from there. Exceptions a
/// worker throws are caught: the report's failure says the root cause (a
/// PeerLostError's rank, or else a rank that is gone or is no longer the
/// process the pool started with, i.e. it died and rejoined while the
/// workers ran, before any other worker's message). Never throws.
PoolReport run_workers(Cluster& cluster, const PoolOptions& options,
                       const std::function<void(uint32_t thread, StartLine& start)>& work);

/// Meets the ranks of `candidates` that are still alive at a barrier and
/// returns those that met (increasing), the same on every rank that returns.
/// Every rank of `candidates` that takes part calls it with the same `name`
/// (different for each meeting) and `candidates` (which include the caller);
/// a rank lost before or while they meet is left out, and no rank needs to
/// know of the loss in advance. Each candidate takes part as one process:
/// rank r as incarnation `incarnations[r]` (Cluster::incarnation; indexed by
/// rank, world_size entries, the same on every caller), or with none given
/// as the one it was when the call began; a rank that died and joined again
/// as a new incarnation (`sluice run --restarts`) is left out too. How: each rank tries a barrier
/// of the members it believes alive (Cluster::alive), and on a PeerLostError tries again without
/// the lost rank. The registry completes a barrier for all of its members or for none, a lost rank
/// stays lost, and every member set a rank tries holds every rank not yet lost, the caller
/// included; so any two sets tried share a rank, which passes at most one of them: at most one set
/// completes. Throws what the barrier throws other than such a
/// PeerLostError (e.g. Error(kRegistry): the registry is gone). Blocks until
/// the others arrive or are lost.
std::vector<uint32_t> meet_survivors(Cluster& cluster, std::string_view name,
                                     const std::vector<uint32_t>& candidates,
                                     const std::vector<uint32_t>& incarnations = {});

/// What run_steps did on this rank.
struct StepsReport {
  /// Steps this process committed (a restarted process: from its return).
  uint64_t committed = 0;
  /// The step after the last one committed: the count once all are.
  uint64_t next = 0;
  /// Attempts undone by a view change (the step ran again in the next view).
  uint64_t retries = 0;
  /// The views this process agreed in (a change it went through, or its
  /// return after a restart).
  uint64_t agreements = 0;
  /// The view the last step committed in.
  uint64_t epoch = 0;
};

/// Runs steps 0 .. count-1 on the members of the job's current view, each
/// committed once on all of them, through losses, rejoins, joins and
/// departures no rank is told of in advance (MPI ULFM's revoke-and-agree
/// loop, written once; an elastic job grows and shrinks through it). Each
/// step: `attempt(view, step)` does this rank's part of it in `view` (declares
/// its flows with Cluster::declare(view, spec), pushes, consumes) and returns
/// the value this rank commits, or Status::kViewChanged / kPeerLost (the
/// view is changing: the step runs again in the next). The members then
/// gather their values in `view`; once that completes, `commit(step, all)`
/// runs on every member with every member's value (Gathered: ranks, values,
/// epoch), and the step is done; if the view changed first, the step runs
/// again. At every view this rank has not agreed in (a restarted or joining
/// process starts there), the members agree how far they got (Cluster::agree) and go
/// on from the furthest step committed. So an attempt may run more than once
/// (throw nothing from it that a rerun must not see), and commit runs once
/// per step on every rank that is a member when the step commits. Every rank
/// of the job calls it with the same `name` and `count`. Throws
/// Error(kInvalidArgument) if an attempt returns another Status,
/// Error(kTimeout) if one call waits longer than `patience` for the others
/// or for a view, and what the calls throw (Error(kRegistry): the registry
/// is lost; what the attempt and commit throw).
StepsReport run_steps(Cluster& cluster, std::string_view name, uint64_t count,
                      const std::function<Result<std::string>(const View&, uint64_t)>& attempt,
                      const std::function<void(uint64_t, const Gathered&)>& commit,
                      std::chrono::milliseconds patience = std::chrono::minutes(5));

class JobContext;

/// One program's harness: command line, main(), exit status. See the top of
/// the file.
class Job {
 public:
  /// name: the program's name in messages and `--help`; summary: one line
  /// saying what it does. `flags`: the standard flags it offers.
  Job(std::string name, std::string summary, JobFlagSet flags = kStandardFlags);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  /// The command line, to add the program's own options and subcommands to
  /// before parse(). CLI11's; include <CLI/CLI.hpp> to use it.
  CLI::App& cli();
  /// The standard flags: defaults before parse(), values after.
  ///@{
  JobFlags& flags() { return flags_; }
  const JobFlags& flags() const { return flags_; }
  ///@}
  /// The program's name, as given to the constructor.
  const std::string& name() const { return name_; }

  /// Parses argv. Returns nothing to go on, or the status to exit with: 0
  /// after printing `--help`, 2 after naming a bad flag.
  std::optional<int> parse(int argc, const char* const* argv);

  /// The ClusterOptions this program joins with: from_env(), then the flags.
  /// Throws Error(kInvalidArgument) naming a malformed variable.
  ClusterOptions cluster_options() const;

  /// Whether the body can take a restarted rank back (`sluice run
  /// --restarts K`: the rank's new process joins as Cluster::incarnation()
  /// > 0 while the others run on, and must find its way into what they are
  /// doing, as sluice-kv's replicas do). Default false: such a process says
  /// that this program cannot take a rank back, leaves at once and exits 1,
  /// and the others carry on as after losing the rank: a job that fails
  /// then fails at once and cleanly, as it would without --restarts, rather
  /// than wait for collectives the others passed long ago (or hold theirs
  /// up until a timeout).
  void set_rejoin(bool takes_restarted_ranks) { rejoin_ = takes_restarted_ranks; }

  /// Joins the job and runs body(ctx) on this rank, then leaves it with
  /// Cluster::leave() (waiting, up to the setup timeout, for what the body's
  /// handles left unfinished); returns the exit status (top of the file).
  /// Never throws.
  int run(const std::function<int(JobContext&)>& body);
  /// For a command that joins no job (a local simulation, a file check):
  /// runs body() with the same exit statuses and messages. Never throws.
  int run_local(const std::function<int()>& body);
  /// parse() then run().
  int main(int argc, const char* const* argv, const std::function<int(JobContext&)>& body);

 private:
  int guarded(Cluster* cluster, const std::function<int()>& body);

  std::string name_;
  JobFlags flags_;
  std::unique_ptr<CLI::App> cli_;
  bool rejoin_ = false;
};

/// What the body of a job gets: the Cluster and the harness's helpers.
class JobContext {
 public:
  /// Job::run makes it; it refers to both, which outlive it.
  JobContext(Job& job, Cluster& cluster) : job_(&job), cluster_(&cluster) {}

  /// The Cluster this rank joined.
  Cluster& cluster() { return *cluster_; }
  /// The standard flags, as parsed (Job::flags()).
  const JobFlags& flags() const { return job_->flags(); }
  /// This rank (Cluster::rank()).
  uint32_t rank() const { return cluster_->rank(); }
  /// The number of ranks (Cluster::world_size()).
  uint32_t world_size() const { return cluster_->world_size(); }

  /// sluice::run_workers on flags().threads threads (or `threads`) of every
  /// rank of the job, starting at a barrier named `name` (the same on every
  /// rank, different for each call).
  PoolReport run_workers(const std::function<void(uint32_t thread, StartLine& start)>& work,
                         std::string_view name = "job-start", uint32_t threads = 0) {
    return sluice::run_workers(
        *cluster_, PoolOptions{threads != 0 ? threads : flags().threads, std::string(name), {}},
        work);
  }

  /// Every rank's `mine`, indexed by rank, on rank 0; empty elsewhere. Every
  /// rank must call it with the same name (setup-time: goes through the
  /// registry). T is copied byte for byte: REQUIRES trivially copyable, and
  /// every rank built from the same source.
  template <class T>
  std::vector<T> gather(std::string_view name, const T& mine) {
    static_assert(std::is_trivially_copyable_v<T>, "gather<T> copies T byte for byte");
    std::vector<std::string> all =
        gather_bytes(name, std::string_view(reinterpret_cast<const char*>(&mine), sizeof(T)));
    std::vector<T> out(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != sizeof(T)) bad_gather(name, r, all[r].size(), sizeof(T));
      std::memcpy(&out[r], all[r].data(), sizeof(T));
    }
    return out;
  }
  /// The same for byte strings of any length.
  std::vector<std::string> gather_bytes(std::string_view name, std::string_view mine);

  /// Prints "<name>: rank R: <failure>" to stderr and returns 1, for `return
  /// ctx.fail(...)` from the body.
  ///@{
  int fail(const JobFailure& failure);
  int fail(std::string_view message);
  ///@}

  /// The transport this rank's flows take to the others in the job: "shm",
  /// "ofi" or "shm+ofi" (this rank alone: "shm"). Ranks that left, and an
  /// elastic job's vacancies, are passed over.
  std::string transport_label() const;

 private:
  [[noreturn]] static void bad_gather(std::string_view name, size_t rank, size_t got, size_t want);

  Job* job_;
  Cluster* cluster_;
};

/// User + system CPU seconds of this process (all threads) so far.
double process_cpu_seconds();

/// A place in the program where a crash is worth testing at exactly that
/// place: between taking locks and installing, between a Paxos accept and
/// its reply. `sluice run --kill-at RANK:NAME[:K]` makes the K-th pass
/// (default the first) of rank RANK's first process through
/// kill_point("NAME") kill that process with SIGKILL, there; no other rank,
/// and no code of the program, knows that it is armed (the launcher sets
/// SLUICE_TEST_KILL_AT=NAME:K in that one process's environment, not in a
/// restarted or spare one's). Without the variable it returns at once (one
/// load of what the first call read). `name`: what --kill-at names.
/// Thread safety: any thread; passes are counted over the whole process.
void kill_point(std::string_view name);

/// For a program that runs until it is stopped (an unbounded source, a
/// service): from now on, the first SIGINT or SIGTERM this process gets
/// (Ctrl-C, or `sluice run` forwarding its own) does not end it but makes
/// stop_requested() true, says so on stderr, and restores the signal's
/// default action, so a second one ends the process at once. The program
/// then finishes as if its input had ended (flows closed, results written,
/// transactions committed) and exits. Call it once, early (it replaces
/// the handlers of both signals); programs that never call it keep the
/// default action. Thread safety: any thread.
void enable_stop_signals();
/// Whether a stop was asked for (enable_stop_signals). Cheap: one atomic load.
bool stop_requested();

}  // namespace sluice
