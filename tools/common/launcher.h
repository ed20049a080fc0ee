// The launcher behind `sluice run` (run.h): its ranks, spares and their
// processes, the failure policy, fault injection. Private to tools/common:
// run.cc (starting, reaping, the event loop, the failure policy),
// run_faults.cc (--kill, --stop) and launcher_spares.cc (--spares).
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "rank_output.h"
#include "restart_policy.h"
#include "run.h"
#include "tool_util.h"

namespace sluice::tool::launch {

using Clock = std::chrono::steady_clock;

// How long ranks get between SIGTERM and SIGKILL.
constexpr auto kKillDelay = std::chrono::seconds(2);
// After the last rank exited, how long to keep reading output that helpers
// it left behind may still write into its pipes.
constexpr auto kDrainDelay = std::chrono::milliseconds(500);

// Launcher diagnostics are written in one call each so that they never split
// a rank's line on the shared stderr.
template <class... Args>
void say(const Args&... args) {
  write_all(STDERR_FILENO, "sluice run: " + log::cat(args...) + "\n");
}

inline Clock::duration after_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// "0,2".
inline std::string rank_list(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

// "rank 3" or "ranks 0,2".
inline std::string ranks_text(const std::vector<uint32_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// A process the launcher started: a rank's (ranks_), a spare's or a
// joiner's (spares_: index is its number among them), or a replaced rank's
// old one (retired_).
struct Rank {
  uint32_t index = 0;
  pid_t pid = -1;
  bool running = false;
  bool spare = false;  // started with SLUICE_SPARE=1, no rank's place taken yet
  // Started with SLUICE_JOIN=1 (--join; in spares_ with spare set too, until
  // the registry gives it a free rank number).
  bool joiner = false;
  // The launcher sent it a signal (forwarded, or to stop it): its death by
  // a signal is a consequence, not a failure of its own.
  bool signalled = false;
  // --restarts: how many times it was started again, and whether it waits
  // to be (until the registry has reported the old process lost, so that
  // the new one's HELLO is a rejoin, or restart_by passes).
  uint32_t restarts = 0;
  bool restart_pending = false;
  bool restart_on_exit = false;  // killed by the launcher for silence, to be restarted
  bool lost_seen = false;        // the registry reported it lost since it started
  bool left_job = false;         // ... as having left (LEAVE): it cannot rejoin
  // Killed by an injected --kill: a failure for the failure policy, but its
  // death by SIGKILL does not count against the exit status.
  bool killed_by_fault = false;
  // Started with SLUICE_TEST_KILL_AT (--kill-at): its death by SIGKILL is
  // the injected one.
  bool kill_point_armed = false;
  // Stopped by an injected --stop and not continued yet.
  bool stopped_by_fault = false;
  // --spares: it failed while a spare waited; the registry gives the spare
  // its place (or spare_by passes and the failure is handled as without).
  bool awaiting_spare = false;
  int failed_status = 0;
  std::chrono::steady_clock::time_point failed_at;
  std::chrono::steady_clock::time_point spare_by;
  uint32_t replaced = 0;  // times a spare took its place
  std::chrono::steady_clock::time_point restart_by;
  std::chrono::steady_clock::time_point restart_not_before;  // --restart-delay
  Stream out;
  Stream err;
};

// Events on the silent pipe: a rank's number, with this bit set when the
// registry reported the rank lost (any cause) rather than silent...
constexpr uint32_t kLostEvent = 0x80000000u;
// ... or this one when the rank's first incarnation joined (faults only);
constexpr uint32_t kJoinedEvent = 0x40000000u;
// with kLostEvent, this one when it left the job (rather than died).
constexpr uint32_t kLeftEvent = 0x20000000u;
// How long a failed rank waits for the registry to report it lost before
// it is started again anyway (it may never have joined).
constexpr auto kRestartWait = std::chrono::seconds(1);
// ... or this one, followed by a second u32, the pid, when a spare (or a
// restarted process: the pid tells) joined as the rank's next incarnation.
constexpr uint32_t kSpareEvent = 0x10000000u;
// How long a failed rank waits for the registry to give its place to a
// spare before its failure is handled as without spares (the spare may
// still be starting).
constexpr auto kSpareWait = std::chrono::seconds(5);

// The signal state the launcher changed for itself, to be undone in ranks.
struct InheritedSignals {
  sigset_t mask;                 // the mask before the launcher blocked its signals
  bool sigpipe_ignored = false;  // SIGPIPE was SIG_IGN before the launcher set it so
};

class Launcher {
 public:
  Launcher(const RunOptions& options, std::string program_path, std::string registry_address,
           std::string secret, const InheritedSignals& inherited, int signal_fd, int silent_fd,
           std::chrono::milliseconds heartbeat_timeout)
      : options_(options),
        restart_policy_(options),
        program_path_(std::move(program_path)),
        registry_address_(std::move(registry_address)),
        secret_(std::move(secret)),
        inherited_(inherited),
        signal_fd_(signal_fd),
        silent_fd_(silent_fd),
        heartbeat_timeout_(heartbeat_timeout) {}

  int run();

 private:
  // One of options_.faults and how far it got.
  struct FaultState {
    enum class Step {
      kDue,         // waits for its time
      kToContinue,  // --stop: the rank is stopped, SIGCONT at continue_at
      kDone,        // injected or skipped
    };
    Fault fault;
    std::string text;  // "--kill 2@1.5"
    Step step = Step::kDue;
    pid_t stopped_pid = -1;  // kToContinue: the process (group) stopped
    Clock::time_point continue_at;
    // Fault::after: when a rank printed its text (the fault's own clock).
    std::optional<Clock::time_point> clock;
  };
  // When `f` comes due: nullopt while its clock has not started.
  std::optional<Clock::time_point> due(const FaultState& f) const;

  enum class Phase {
    kRunning,      // no failure yet
    kGrace,        // a rank failed or a signal was forwarded: others may finish
    kTerminating,  // SIGTERM sent; SIGKILL at kill_deadline_
    kKilled,       // SIGKILL sent; only reaping is left
  };

  bool start_ranks();
  bool start_rank(Rank& rank);
  void reap();
  // `spares_ok`: a spare, if one waits, may take the failed rank's place.
  void on_exit(Rank& rank, int status, bool spares_ok = true);
  // "exited with status 3", "was killed by signal 9 (SIGKILL), as injected (--kill)".
  std::string ended_text(const Rank& rank, int status) const;
  // launcher_spares.cc (--spares):
  bool start_spares();
  size_t idle_spares() const {
    return static_cast<size_t>(std::count_if(spares_.begin(), spares_.end(),
                                             [](const Rank& s) { return s.running && !s.joiner; }));
  }
  // --join: starts the joiners that came due on the faults' clock.
  void on_joins(Clock::time_point now);
  void report_joins_not_started() const;
  // The registry took spare process `pid` in as `rank`'s next incarnation.
  void on_spare_joined(uint32_t rank, uint32_t pid);
  // With --restarts: a spare that took `rank`'s place is replaced by a new
  // one, as a restart of that rank (its --restarts, the rate and delay).
  void replenish_spare(Rank& rank);
  // A failed rank whose spare did not come by spare_by: handled as without.
  // And the new spares replenish_spare() scheduled, once due.
  void on_spare_timers(Clock::time_point now);
  bool spares_awaited() const {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const Rank& r) { return r.awaiting_spare; });
  }
  // Once no rank runs: SIGTERM to the spares no rank needed, SIGKILL later.
  void end_spares(Clock::time_point now);
  void reap_others();
  bool others_running() const;
  // Every process's streams: ranks', spares' and replaced ones'.
  template <class F>
  void for_each_stream(F&& f) {
    for (std::vector<Rank>* list : {&ranks_, &spares_, &retired_}) {
      for (Rank& r : *list) {
        f(r.out);
        f(r.err);
      }
    }
  }
  // Says why when the restart rate is what refuses it.
  bool can_restart(const Rank& rank) {
    if (phase_ != Phase::kRunning) return false;
    std::string why;
    if (restart_policy_.allows(rank.restarts, Clock::now(), &why)) return true;
    if (!why.empty()) say("rank ", rank.index, " is not started again: ", why);
    return false;
  }
  void start_pending_restarts(Clock::time_point now);
  bool restarts_pending() const {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const Rank& r) { return r.restart_pending; });
  }
  void on_signal(int sig);
  void report_endpoints(const std::vector<uint32_t>& ranks, const char* when);
  // The endpoints' report, and with --stacks-on-timeout every thread's
  // stack, of ranks still running at the timeout or after the grace period.
  void report_stuck(const std::vector<uint32_t>& ranks, const char* when);
  void on_silent_ranks();
  void on_joined(uint32_t rank);
  void on_timers(Clock::time_point now);
  void on_faults(Clock::time_point now);
  void report_faults_not_injected() const;
  void signal_running(int sig);
  void begin_grace(const std::string& reason);
  void begin_terminate();
  std::vector<uint32_t> running_ranks() const;
  bool any_stream_open() const;
  void set_exit_status(int status) {
    if (!exit_status_) exit_status_ = status;
  }

  const RunOptions& options_;
  RestartPolicy restart_policy_;
  const std::string program_path_;
  const std::string registry_address_;
  const std::string secret_;
  const InheritedSignals inherited_;
  const int signal_fd_;
  // Ranks (u32 each) the registry declared dead for silence: stopped or hung
  // processes that would otherwise keep the job alive forever.
  const int silent_fd_;
  const std::chrono::milliseconds heartbeat_timeout_;

  std::vector<Rank> ranks_;
  std::vector<Rank> spares_;  // waiting (running) or exited before a rank needed them
  std::vector<Clock::time_point> spare_starts_;  // replenish_spare()'s, when each is due
  uint32_t next_spare_ = 0;                      // the index the next spare started gets
  std::vector<Rank> retired_;  // replaced by a spare while still running or draining
  std::optional<Clock::time_point> spares_kill_at_;  // end_spares() sent SIGTERM
  Phase phase_ = Phase::kRunning;
  Clock::time_point start_;
  std::optional<Clock::time_point> job_deadline_;
  Clock::time_point grace_deadline_;
  Clock::time_point kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
  std::string grace_reason_;
  int signals_received_ = 0;
  std::optional<int> exit_status_;
  std::vector<FaultState> faults_;
  // --join: when each joiner starts (seconds on the faults' clock), and
  // whether it did.
  struct JoinState {
    double at_seconds = 0;
    bool started = false;
  };
  std::vector<JoinState> joins_;
  uint32_t next_joiner_ = 0;  // the index the next joiner started gets
  // Which ranks' first incarnation joined the registry, and when the last
  // did: the job started, and the faults' times count from then.
  std::vector<bool> joined_;
  uint32_t joined_count_ = 0;
  std::optional<Clock::time_point> job_started_;
  // When the faults' clock started: job_started_, or with --faults-after the
  // first line a rank printed that contains its text.
  std::optional<Clock::time_point> faults_clock_;
  void on_rank_line(std::string_view line);
};

// SIGKILL/SIGSTOP/SIGCONT for a rank's process group (or the process, if its
// group is already gone). REQUIRES: rank.running, so that the pid is not
// reaped and neither it nor its group id can have been reused.
// True (and *status) if the rank's process has ended; never blocks.
// REQUIRES: rank.running (its pid is not reaped yet).
inline bool reaped(const Rank& rank, int* status) {
  pid_t got;
  do {
    got = ::waitpid(rank.pid, status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  return got == rank.pid;
}

inline void signal_rank(const Rank& rank, int sig) {
  if (::kill(-rank.pid, sig) != 0) ::kill(rank.pid, sig);
}

}  // namespace sluice::tool::launch
