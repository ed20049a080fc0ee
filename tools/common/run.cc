#include "run.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "common/log.h"
#include "control/registry_server.h"
#include "counters_reader.h"
#include "process.h"
#include "rank_output.h"
#include "restart_policy.h"
#include "sluice/errors.h"
#include "tool_util.h"
#include "transport/shm/region.h"

namespace sluice::tool {
namespace {

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

Clock::duration after_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// "0,2".
std::string rank_list(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i == 0 ? "" : ",") + std::to_string(ranks[i]);
  return out;
}

// "rank 3" or "ranks 0,2".
std::string ranks_text(const std::vector<uint32_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

struct Rank {
  uint32_t index = 0;
  pid_t pid = -1;
  bool running = false;
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
  // Stopped by an injected --stop and not continued yet.
  bool stopped_by_fault = false;
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
  };

  enum class Phase {
    kRunning,      // no failure yet
    kGrace,        // a rank failed or a signal was forwarded: others may finish
    kTerminating,  // SIGTERM sent; SIGKILL at kill_deadline_
    kKilled,       // SIGKILL sent; only reaping is left
  };

  bool start_ranks();
  bool start_rank(Rank& rank);
  void reap();
  void on_exit(Rank& rank, int status);
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
void signal_rank(const Rank& rank, int sig) {
  if (::kill(-rank.pid, sig) != 0) ::kill(rank.pid, sig);
}

bool Launcher::start_ranks() {
  ranks_.resize(options_.ranks);
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    ranks_[r].index = r;
    if (!start_rank(ranks_[r])) return false;
  }
  return true;
}

bool Launcher::start_rank(Rank& rank) {
  proc::SpawnOptions spawn;
  spawn.argv = options_.command;
  spawn.argv[0] = program_path_;
  // The job's variables replace any inherited ones (a nested `sluice run`,
  // or leftovers in the user's shell).
  std::map<std::string, std::string> env = options_.env;
  env["SLUICE_RANK"] = std::to_string(rank.index);
  env["SLUICE_WORLD_SIZE"] = std::to_string(options_.ranks);
  env["SLUICE_REGISTRY"] = registry_address_;
  env["SLUICE_SECRET"] = secret_;
  spawn.env = proc::environment_with(env);
  spawn.out = proc::Output::kPipe;
  spawn.err = proc::Output::kPipe;
  // Own process group: the launcher signals the whole group, which reaches
  // helpers the rank started.
  spawn.new_process_group = true;
  // If the launcher dies, nothing else would stop the rank.
  spawn.die_with_parent = true;
  spawn.signal_mask = inherited_.mask;
  if (!inherited_.sigpipe_ignored) spawn.reset_signals.push_back(SIGPIPE);
  // Keep the registry's sockets and other ranks' pipes out of the rank.
  spawn.close_other_fds = true;
  proc::Process child;
  try {
    child = proc::Process::spawn(spawn);
  } catch (const proc::SpawnError& e) {
    say("cannot start rank ", rank.index, ": ", e.what());
    set_exit_status(e.exit_status());
    return false;
  }
  ::fcntl(child.out().get(), F_SETFL, O_NONBLOCK);
  ::fcntl(child.err().get(), F_SETFL, O_NONBLOCK);
  rank.out.fd = std::move(child.out());
  rank.err.fd = std::move(child.err());
  // The launcher's event loop reaps its ranks itself (SIGCHLD, WNOHANG).
  rank.pid = child.release();
  rank.running = true;
  rank.killed_by_fault = false;
  rank.stopped_by_fault = false;
  for (Stream* s : {&rank.out, &rank.err}) {
    s->prefix = "[" + std::to_string(rank.index) + "] ";
    if (!options_.faults_after.empty())
      s->on_line = [this](std::string_view line) { on_rank_line(line); };
  }
  rank.out.out_fd = STDOUT_FILENO;
  rank.err.out_fd = STDERR_FILENO;
  return true;
}

std::vector<uint32_t> Launcher::running_ranks() const {
  std::vector<uint32_t> out;
  for (const Rank& r : ranks_) {
    if (r.running) out.push_back(r.index);
  }
  return out;
}

bool Launcher::any_stream_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& r) { return r.out.fd.valid() || r.err.fd.valid(); });
}

void Launcher::signal_running(int sig) {
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    // The pid is not reaped yet, so neither it nor its group id can have
    // been reused.
    if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
    r.signalled = true;
    // A rank an injected --stop holds would get the signal only when
    // continued.
    if (r.stopped_by_fault && sig != SIGKILL) {
      signal_rank(r, SIGCONT);
      r.stopped_by_fault = false;
    }
  }
}

void Launcher::begin_grace(const std::string& reason) {
  if (phase_ != Phase::kRunning) return;
  grace_reason_ = reason;
  phase_ = Phase::kGrace;
  grace_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(options_.grace_seconds));
}

void Launcher::begin_terminate() {
  signal_running(SIGTERM);
  phase_ = Phase::kTerminating;
  kill_deadline_ = Clock::now() + kKillDelay;
}

void Launcher::reap() {
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    int status = 0;
    pid_t got;
    do {
      got = ::waitpid(r.pid, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got == r.pid) on_exit(r, status);
  }
}

void Launcher::on_exit(Rank& rank, int status) {
  rank.running = false;
  // Its last words come before the launcher's report about it.
  rank.out.pump();
  rank.err.pump();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    log::debug("rank ", rank.index, " exited with status 0");
    return;
  }
  // Its death was asked for (--kill): the failure policy applies, but the
  // exit status does not count it.
  const bool injected = rank.killed_by_fault && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  const char* const injected_note = injected ? ", as injected (--kill)" : "";
  // A rank that left the job before it failed cannot rejoin it (the
  // registry refuses a rank that left): it is not started again.
  if (rank.left_job && options_.restarts > 0 && phase_ == Phase::kRunning)
    say("rank ", rank.index, " left the job before it ended: it is not started again");
  if ((WIFEXITED(status) || WIFSIGNALED(status)) && (!rank.signalled || rank.restart_on_exit) &&
      !rank.left_job && can_restart(rank)) {
    if (WIFEXITED(status)) {
      say("rank ", rank.index, " exited with status ", WEXITSTATUS(status));
    } else if (!rank.restart_on_exit) {
      say("rank ", rank.index, " was killed by signal ", WTERMSIG(status), " (",
          signal_name(WTERMSIG(status)), ")", injected_note);
    }
    ++rank.restarts;
    rank.restart_pending = true;
    rank.restart_on_exit = false;
    const Clock::time_point now = Clock::now();
    const Clock::duration delay = restart_policy_.record(rank.restarts, now);
    rank.restart_by = now + kRestartWait;
    rank.restart_not_before = now + delay;
    say("starting rank ", rank.index, " again (restart ", rank.restarts, " of ", options_.restarts,
        ")",
        delay > Clock::duration::zero()
            ? log::cat(" in ", seconds_text(std::chrono::duration<double>(delay).count()), " s")
            : "",
        ": it rejoins the job as a new process");
    return;
  }
  int failure = 0;
  if (WIFEXITED(status)) {
    failure = WEXITSTATUS(status);
    say("rank ", rank.index, " exited with status ", failure);
  } else if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    failure = 128 + sig;
    if (rank.signalled && !rank.restart_on_exit) {
      // The launcher already said why it signalled the ranks.
      log::info("rank ", rank.index, " was killed by signal ", sig, " (", signal_name(sig), ")");
      // Whatever made the launcher signal it has set the exit status, except
      // an injected --kill, which does not count: then the ranks the
      // launcher had to stop after it are the failure.
      set_exit_status(failure);
      return;
    }
    if (rank.restart_on_exit) {
      // Killed for silence to be restarted, but the job is ending meanwhile:
      // a failure after all.
      rank.restart_on_exit = false;
      set_exit_status(failure);
      return;
    }
    say("rank ", rank.index, " was killed by signal ", sig, " (", signal_name(sig), ")",
        injected_note);
  } else {
    return;  // stopped or continued: not reported without WUNTRACED
  }
  if (!injected) set_exit_status(failure);
  if (options_.keep_going) {
    say("the other ranks go on without rank ", rank.index, " (--keep-going)");
    return;
  }
  begin_grace("rank " + std::to_string(rank.index) + " failed");
}

// What each running rank's flow endpoints were doing (their counters areas,
// tools/common/counters_reader.h): which are still open, and how far they
// got. A hang shows as the endpoints that never ended.
void Launcher::report_endpoints(const std::vector<uint32_t>& ranks, const char* when) {
  for (uint32_t r : ranks) {
    const std::vector<Process> procs = read_counters(ranks_[r].pid);
    if (procs.empty() || procs[0].endpoints.empty()) {
      say("rank ", r, " (pid ", ranks_[r].pid, ") ", when, ": no flow endpoints");
      continue;
    }
    namespace ctr = detail::counters;
    const auto open = std::count_if(procs[0].endpoints.begin(), procs[0].endpoints.end(),
                                    ctr::open_flow_endpoint);
    say("rank ", r, " (pid ", ranks_[r].pid, ") ", when, ": ", procs[0].endpoints.size(),
        " endpoint(s), ", open, " flow endpoint(s) not ended");
    // Every rank this launcher started runs on this host.
    const auto host_of = [this](uint32_t rank) {
      return rank < ranks_.size() ? detail::host_name() : std::string();
    };
    for (const std::string& line :
         ctr::report_lines(procs[0].endpoints, ctr::now_ns(), host_of, true)) {
      say(line);
    }
  }
}

void Launcher::on_signal(int sig) {
  if (sig == SIGUSR1) {
    // A report for whoever asked, the job untouched.
    report_endpoints(running_ranks(), "on SIGUSR1");
    return;
  }
  ++signals_received_;
  std::vector<uint32_t> running = running_ranks();
  if (running.empty()) return;
  set_exit_status(128 + sig);
  if (signals_received_ > 1 || phase_ == Phase::kTerminating) {
    say("received ", signal_name(sig), " again; killing ", ranks_text(running), " with SIGKILL");
    signal_running(SIGKILL);
    phase_ = Phase::kKilled;
    return;
  }
  say("received ", signal_name(sig), "; forwarded it to ", ranks_text(running), "; waiting up to ",
      seconds_text(options_.grace_seconds), " s for them to exit (send it again to kill them now)");
  signal_running(sig);
  begin_grace(signal_name(sig) + " was forwarded to them");
}

void Launcher::on_timers(Clock::time_point now) {
  std::vector<uint32_t> running = running_ranks();
  if (running.empty()) return;
  if (job_deadline_ && now >= *job_deadline_ &&
      (phase_ == Phase::kRunning || phase_ == Phase::kGrace)) {
    say("timed out after ", seconds_text(options_.timeout_seconds),
        " s; ranks still running: ", rank_list(running), "; sending SIGTERM, then SIGKILL after ",
        kKillDelay.count(), " s");
    report_endpoints(running, "at the timeout");
    if (options_.stacks_on_timeout) {
      for (uint32_t r : running) {
        say("stacks of rank ", r, " (process group ", ranks_[r].pid,
            "):", proc::stacks_of_group(ranks_[r].pid));
      }
    }
    set_exit_status(124);
    begin_terminate();
    return;
  }
  if (phase_ == Phase::kGrace && now >= grace_deadline_) {
    say(ranks_text(running), " still running ", seconds_text(options_.grace_seconds), " s after ",
        grace_reason_, "; sending SIGTERM, then SIGKILL after ", kKillDelay.count(), " s");
    begin_terminate();
    return;
  }
  if (phase_ == Phase::kTerminating && now >= kill_deadline_) {
    say(ranks_text(running), " did not exit ", kKillDelay.count(),
        " s after SIGTERM; sending SIGKILL");
    signal_running(SIGKILL);
    phase_ = Phase::kKilled;
  }
}

void Launcher::start_pending_restarts(Clock::time_point now) {
  for (Rank& r : ranks_) {
    if (r.restart_pending && phase_ != Phase::kRunning) {
      // The job is ending (a signal, the timeout, another rank's failure):
      // no new process. The failure the restart would have made up for counts.
      r.restart_pending = false;
      say("rank ", r.index, " is not started again: the job is ending");
      set_exit_status(1);
      continue;
    }
    if (!r.restart_pending || now < r.restart_not_before || (!r.lost_seen && now < r.restart_by))
      continue;
    r.restart_pending = false;
    r.lost_seen = false;
    r.left_job = false;
    r.signalled = false;
    if (!start_rank(r))
      begin_grace("rank " + std::to_string(r.index) + " could not be started again");
  }
}

void Launcher::on_silent_ranks() {
  uint32_t r;
  while (::read(silent_fd_, &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r))) {
    if ((r & kLostEvent) != 0) {
      const uint32_t rank = r & ~(kLostEvent | kLeftEvent);
      if (rank < ranks_.size()) {
        ranks_[rank].lost_seen = true;
        ranks_[rank].left_job = (r & kLeftEvent) != 0;
      }
      continue;
    }
    if ((r & kJoinedEvent) != 0) {
      on_joined(r & ~kJoinedEvent);
      continue;
    }
    if (r >= ranks_.size() || !ranks_[r].running) continue;
    const bool again = can_restart(ranks_[r]);
    say("rank ", r, " stopped heart-beating (no heartbeat for ", heartbeat_timeout_.count(),
        " ms; stopped or hung); killing it with SIGKILL", again ? ", to start it again" : "");
    if (::kill(-ranks_[r].pid, SIGKILL) != 0) ::kill(ranks_[r].pid, SIGKILL);
    ranks_[r].signalled = true;
    ranks_[r].restart_on_exit = again;
    if (again) continue;
    set_exit_status(128 + SIGKILL);
    if (options_.keep_going) {
      say("the other ranks go on without rank ", r, " (--keep-going)");
      continue;
    }
    begin_grace("rank " + std::to_string(r) + " stopped heart-beating");
  }
}

void Launcher::on_joined(uint32_t rank) {
  if (rank >= joined_.size() || joined_[rank]) return;
  joined_[rank] = true;
  if (++joined_count_ < options_.ranks) return;
  job_started_ = Clock::now();
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.2f",
                std::chrono::duration<double>(*job_started_ - start_).count());
  if (!options_.faults_after.empty()) {
    log::info("every rank joined the job ", elapsed, " s after the launch");
    return;
  }
  faults_clock_ = job_started_;
  log::info("every rank joined the job ", elapsed, " s after the launch; --kill and --stop ",
            "count from now");
}

// --faults-after: the first line of any rank that contains the text starts
// the faults' clock (a line may come before the launcher has read every
// rank's join: both arrive through pipes it reads in one loop).
void Launcher::on_rank_line(std::string_view line) {
  if (faults_clock_ || line.find(options_.faults_after) == std::string_view::npos) return;
  faults_clock_ = Clock::now();
  say("a rank printed '", options_.faults_after, "'; --kill and --stop count from now");
}

void Launcher::on_faults(Clock::time_point now) {
  if (!faults_clock_) return;
  for (FaultState& f : faults_) {
    Rank& rank = ranks_[f.fault.rank];
    const uint32_t r = rank.index;
    if (f.step == FaultState::Step::kDue &&
        now >= *faults_clock_ + after_seconds(f.fault.at_seconds)) {
      f.step = FaultState::Step::kDone;
      if (!rank.running) {
        say(f.text, " skipped: rank ", r, " is not running (",
            rank.restart_pending ? "it waits to be started again" : "it exited", ")");
        continue;
      }
      if (phase_ == Phase::kTerminating || phase_ == Phase::kKilled) {
        say(f.text, " skipped: the launcher is stopping the job");
        continue;
      }
      if (f.fault.kind == Fault::Kind::kKill) {
        say("injecting ", f.text, ": SIGKILL to rank ", r, " (pid ", rank.pid, ", at ",
            realtime_text(), ")");
        signal_rank(rank, SIGKILL);
        rank.killed_by_fault = true;
        continue;
      }
      say("injecting ", f.text, ": SIGSTOP to rank ", r, " (pid ", rank.pid, ", at ",
          realtime_text(), "), SIGCONT in ", seconds_text(f.fault.duration_seconds), " s");
      signal_rank(rank, SIGSTOP);
      rank.stopped_by_fault = true;
      f.step = FaultState::Step::kToContinue;
      f.stopped_pid = rank.pid;
      f.continue_at = now + after_seconds(f.fault.duration_seconds);
    } else if (f.step == FaultState::Step::kToContinue && now >= f.continue_at) {
      f.step = FaultState::Step::kDone;
      if (!rank.running || rank.pid != f.stopped_pid) {
        say(f.text, ": SIGCONT skipped: rank ", r, " (pid ", f.stopped_pid,
            ") is no longer running");
        continue;
      }
      if (!rank.stopped_by_fault) continue;  // the launcher continued it to signal it
      say(f.text, ": SIGCONT to rank ", r, " (pid ", rank.pid, ") after ",
          seconds_text(f.fault.duration_seconds), " s stopped");
      signal_rank(rank, SIGCONT);
      rank.stopped_by_fault = false;
    }
  }
}

void Launcher::report_faults_not_injected() const {
  for (const FaultState& f : faults_) {
    if (f.step != FaultState::Step::kDue) continue;
    if (faults_clock_) {
      say(f.text, " was not injected: the job ended first");
    } else if (!options_.faults_after.empty()) {
      say(f.text, " was not injected: no rank printed a line containing '", options_.faults_after,
          "' (--faults-after)");
    } else {
      say(f.text, " was not injected: the job never started (", joined_count_, " of ",
          options_.ranks,
          " ranks joined its registry; --kill and --stop count from when all have)");
    }
  }
}

int Launcher::run() {
  start_ = Clock::now();
  joined_.assign(options_.ranks, false);
  for (const Fault& fault : options_.faults) {
    faults_.push_back(FaultState{fault, fault_text(fault)});
  }
  if (options_.timeout_seconds > 0) {
    job_deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.timeout_seconds));
  }
  if (!start_ranks()) {
    // Ranks already started would wait for the missing one until their own
    // timeout; stop them now instead of granting a grace period.
    if (std::vector<uint32_t> started = running_ranks(); !started.empty()) {
      say("stopping ", ranks_text(started), ", which had already started, with SIGTERM");
      begin_terminate();
    }
  }
  reap();  // a rank may have exited before the loop watches SIGCHLD

  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  while (true) {
    start_pending_restarts(Clock::now());
    const bool ranks_left = !running_ranks().empty() || restarts_pending();
    if (!ranks_left && !drain_deadline_) drain_deadline_ = Clock::now() + kDrainDelay;
    if (!ranks_left && (!any_stream_open() || Clock::now() >= *drain_deadline_)) break;

    // The nearest deadline bounds the wait; without one, wait for events.
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
      if (!next || t < *next) next = t;
    };
    if (ranks_left) {
      if (job_deadline_ && (phase_ == Phase::kRunning || phase_ == Phase::kGrace))
        consider(*job_deadline_);
      if (phase_ == Phase::kGrace) consider(grace_deadline_);
      if (phase_ == Phase::kTerminating) consider(kill_deadline_);
      for (const Rank& r : ranks_)
        if (r.restart_pending) {
          consider(r.restart_by);
          consider(r.restart_not_before);
        }
      if (faults_clock_) {
        for (const FaultState& f : faults_) {
          if (f.step == FaultState::Step::kDue)
            consider(*faults_clock_ + after_seconds(f.fault.at_seconds));
          if (f.step == FaultState::Step::kToContinue) consider(f.continue_at);
        }
      }
    } else {
      consider(*drain_deadline_);
    }
    int timeout_ms = -1;
    if (next) {
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, 60'000));
    }

    fds.clear();
    streams.clear();
    fds.push_back({signal_fd_, POLLIN, 0});
    fds.push_back({silent_fd_, POLLIN, 0});
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (!s->fd.valid()) continue;
        fds.push_back({s->fd.get(), POLLIN, 0});
        streams.push_back(s);
      }
    }
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      // Without poll the launcher can watch nothing; end the job rather
      // than spin.
      say("poll failed: ", std::strerror(errno), "; killing ", ranks_text(running_ranks()));
      signal_running(SIGKILL);
      set_exit_status(1);
      for (Rank& r : ranks_) {
        while (r.running && ::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        r.running = false;
      }
      break;
    }
    if (ready > 0) {
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) streams[i - 2]->pump();
      }
      if (fds[1].revents & POLLIN) on_silent_ranks();
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info;
        bool child_exited = false;
        while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
          if (info.ssi_signo == SIGCHLD) {
            child_exited = true;
          } else {
            on_signal(static_cast<int>(info.ssi_signo));
          }
        }
        // SIGCHLDs coalesce, so every unreaped rank is checked.
        if (child_exited) reap();
      }
    }
    on_timers(Clock::now());
    on_faults(Clock::now());
  }
  for (Rank& r : ranks_) {
    r.out.flush();
    r.err.flush();
  }
  report_faults_not_injected();

  if (exit_status_) return *exit_status_;
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.2f",
                std::chrono::duration<double>(Clock::now() - start_).count());
  log::info("all ", options_.ranks, " ranks exited with status 0 after ", elapsed, " s");
  return 0;
}

}  // namespace

int run_job(const RunOptions& options) {
  if (options.ranks < 1) {
    say("-n ", options.ranks, ": the number of ranks must be at least 1");
    return 2;
  }
  if (options.command.empty()) {
    say("no program given; usage: sluice run -n N [options] -- PROGRAM [ARGS...]");
    return 2;
  }
  if (!(options.grace_seconds >= 0) || !std::isfinite(options.grace_seconds)) {
    say("--grace ", options.grace_seconds, ": must be a number of seconds >= 0");
    return 2;
  }
  if (!(options.timeout_seconds >= 0) || !std::isfinite(options.timeout_seconds)) {
    say("--timeout ", options.timeout_seconds,
        ": must be a number of seconds > 0 (or 0 for no limit)");
    return 2;
  }
  if (options.bind_host.empty()) {
    say("--bind needs a host address, e.g. 127.0.0.1 or this host's address on the fast network");
    return 2;
  }
  if (const std::string problem = check_faults(options); !problem.empty()) {
    say(problem);
    return 2;
  }
  ensure_stdio_open();
  log::set_tag("run");

  std::string resolve_error;
  int resolve_status = 127;
  std::optional<std::string> program =
      proc::find_program(options.command[0], &resolve_error, &resolve_status);
  if (!program) {
    say(resolve_error);
    return resolve_status;
  }

  control::RegistryOptions registry_options;
  registry_options.bind_host = options.bind_host;
  registry_options.port = 0;
  registry_options.world_size = options.ranks;
  try {
    if (!options.metrics.empty()) {
      registry_options.metrics = true;
      const std::string warning = metrics_host_port(options.metrics, &registry_options.metrics_host,
                                                    &registry_options.metrics_port);
      if (!warning.empty()) say(warning);
    }
    registry_options.heartbeat_timeout = read_environment().options.peer_timeout;
    registry_options.secret = random_secret();
  } catch (const Error& e) {
    say(e.what());
    return 2;
  }

  // Block the signals the launcher waits for before any thread exists, so
  // that the registry thread inherits the mask and they all arrive through
  // the signalfd. Children restore the original mask before exec.
  InheritedSignals inherited;
  sigset_t wanted;
  sigemptyset(&wanted);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&wanted, sig);
  pthread_sigmask(SIG_BLOCK, &wanted, &inherited.mask);
  // A reader of our stdout that went away must not kill the launcher while
  // ranks still run; writes then fail with EPIPE and are dropped.
  inherited.sigpipe_ignored = ::signal(SIGPIPE, SIG_IGN) == SIG_IGN;
  Fd signal_fd(::signalfd(-1, &wanted, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) {
    say("cannot create a signalfd: ", std::strerror(errno));
    return 1;
  }

  int silent[2];
  if (::pipe2(silent, O_CLOEXEC | O_NONBLOCK) != 0) {
    say("cannot create a pipe: ", std::strerror(errno));
    return 1;
  }
  Fd silent_r(silent[0]), silent_w(silent[1]);
  registry_options.on_silent_rank = [fd = silent_w.get()](uint32_t rank, const std::string&) {
    (void)!::write(fd, &rank, sizeof(rank));
  };
  if (options.restarts > 0) {
    registry_options.on_lost_rank = [fd = silent_w.get()](uint32_t rank, bool left) {
      const uint32_t event = rank | kLostEvent | (left ? kLeftEvent : 0);
      (void)!::write(fd, &event, sizeof(event));
    };
  }
  if (!options.faults.empty()) {
    // Only first incarnations: the job starts once, and faults count from then.
    registry_options.on_joined = [fd = silent_w.get()](uint32_t rank, uint32_t incarnation) {
      if (incarnation != 0) return;
      const uint32_t event = rank | kJoinedEvent;
      (void)!::write(fd, &event, sizeof(event));
    };
  }

  std::unique_ptr<control::RegistryServer> registry;
  try {
    registry = std::make_unique<control::RegistryServer>(registry_options);
  } catch (const std::exception& e) {
    say("cannot start the job registry on ", options.bind_host, ": ", e.what(),
        "; check that --bind (and --metrics) name an address of this host");
    return 1;
  }
  const std::string address = registry->address();
  if (registry_options.metrics) {
    say("Prometheus metrics at http://", registry->metrics_address(), "/metrics");
  }
  // Stops and joins the registry however the launcher returns.
  struct RegistryThread {
    control::RegistryServer& server;
    std::thread thread;
    ~RegistryThread() {
      server.stop();
      thread.join();
    }
  } registry_thread{*registry, std::thread([&server = *registry] {
                      try {
                        server.run();
                      } catch (const std::exception& e) {
                        log::error("the job registry stopped: ", e.what(),
                                   "; ranks that need it will fail");
                      }
                    })};
  log::info("registry at ", address, "; starting ", options.ranks, " ranks of ", *program);

  return Launcher(options, *program, address, registry_options.secret, inherited, signal_fd.get(),
                  silent_r.get(), registry_options.heartbeat_timeout)
      .run();
}

}  // namespace sluice::tool
