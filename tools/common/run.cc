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
#include "launcher.h"
#include "process.h"
#include "rank_output.h"
#include "restart_policy.h"
#include "sluice/errors.h"
#include "tool_util.h"
#include "transport/shm/region.h"

namespace sluice::tool::launch {

bool Launcher::start_ranks() {
  // An elastic job's vacancies (--max-ranks) have a slot and no process
  // until a joiner takes one (on_spare_joined).
  ranks_.resize(options_.rank_numbers());
  for (uint32_t r = 0; r < ranks_.size(); ++r) ranks_[r].index = r;
  for (uint32_t r = 0; r < options_.ranks; ++r) {
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
  if (rank.spare) {
    env.erase("SLUICE_RANK");
    env["SLUICE_SPARE"] = rank.joiner ? "0" : "1";
    env["SLUICE_JOIN"] = rank.joiner ? "1" : "0";
  } else {
    env["SLUICE_SPARE"] = "0";  // over an inherited one (a nested `sluice run`)
    env["SLUICE_JOIN"] = "0";
    env["SLUICE_RANK"] = std::to_string(rank.index);
  }
  // --kill-at: the rank's first process only, and no other process at all.
  env["SLUICE_TEST_KILL_AT"] = "";
  rank.kill_point_armed = false;
  if (!rank.spare && rank.restarts == 0 && rank.replaced == 0) {
    for (const KillAt& k : options_.kill_at) {
      if (k.rank != rank.index) continue;
      env["SLUICE_TEST_KILL_AT"] = log::cat(k.name, ":", k.pass);
      rank.kill_point_armed = true;
    }
  }
  env["SLUICE_WORLD_SIZE"] = std::to_string(options_.rank_numbers());
  env["SLUICE_REGISTRY"] = registry_address_;
  env["SLUICE_SECRET"] = secret_;
  // A spare has no rank: an inherited SLUICE_RANK would contradict it.
  spawn.env =
      rank.spare ? proc::environment_with(env, {"SLUICE_RANK"}) : proc::environment_with(env);
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
    say("cannot start ",
        rank.joiner  ? "joiner "
        : rank.spare ? "spare "
                     : "rank ",
        rank.index, ": ", e.what());
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
    s->prefix = log::cat(rank.joiner ? "[joiner " : rank.spare ? "[spare " : "[", rank.index, "] ");
    const bool after = std::any_of(options_.faults.begin(), options_.faults.end(),
                                   [](const Fault& f) { return !f.after.empty(); });
    if (!options_.faults_after.empty() || after)
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
  const auto open = [](const Rank& r) { return r.out.fd.valid() || r.err.fd.valid(); };
  return std::any_of(ranks_.begin(), ranks_.end(), open) ||
         std::any_of(spares_.begin(), spares_.end(), open) ||
         std::any_of(retired_.begin(), retired_.end(), open);
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
  // Spares and replaced processes end with the job.
  for (std::vector<Rank>* list : {&spares_, &retired_}) {
    for (Rank& r : *list) {
      if (!r.running) continue;
      signal_rank(r, sig);
      r.signalled = true;
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
    int status = 0;
    if (r.running && reaped(r, &status)) on_exit(r, status);
  }
  reap_others();
}

std::string Launcher::ended_text(const Rank& rank, int status) const {
  if (WIFEXITED(status)) return log::cat("exited with status ", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const char* note = sig != SIGKILL          ? ""
                     : rank.killed_by_fault  ? ", as injected (--kill)"
                     : rank.kill_point_armed ? ", at its kill point (--kill-at)"
                                             : "";
  return log::cat("was killed by signal ", sig, " (", signal_name(sig), ")", note);
}

void Launcher::on_exit(Rank& rank, int status, bool spares_ok) {
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
  const bool injected = (rank.killed_by_fault || rank.kill_point_armed) && WIFSIGNALED(status) &&
                        WTERMSIG(status) == SIGKILL;
  const char* const injected_note = !injected              ? ""
                                    : rank.killed_by_fault ? ", as injected (--kill)"
                                                           : ", at its kill point (--kill-at)";
  if ((WIFEXITED(status) || WIFSIGNALED(status)) && (!rank.signalled || rank.restart_on_exit) &&
      !rank.left_job && spares_ok && phase_ == Phase::kRunning && idle_spares() > 0) {
    // The registry gives its place to a spare once it has declared it lost
    // (on_spare_joined): a closed connection, at once.
    say("rank ", rank.index, " ", ended_text(rank, status), "; a spare takes its place");
    rank.awaiting_spare = true;
    rank.failed_status = status;
    rank.failed_at = Clock::now();
    rank.spare_by = rank.failed_at + std::max<Clock::duration>(kSpareWait, 2 * heartbeat_timeout_);
    return;
  }
  // A rank that left the job before it failed cannot rejoin it (the
  // registry refuses a rank that left): it is not started again.
  if (rank.left_job && options_.restarts > 0 && phase_ == Phase::kRunning)
    say("rank ", rank.index, " left the job before it ended: it is not started again");
  // Exit status 2 is a usage error (sluice/job.h: a bad flag, a file that
  // does not parse): a new process would fail the same way.
  const bool usage_error = WIFEXITED(status) && WEXITSTATUS(status) == 2;
  if (usage_error && options_.restarts > 0 && phase_ == Phase::kRunning && !rank.left_job) {
    say("rank ", rank.index,
        " exited with status 2, a usage error: it is not started again (it would fail the "
        "same way)");
  }
  if ((WIFEXITED(status) || WIFSIGNALED(status)) && (!rank.signalled || rank.restart_on_exit) &&
      !rank.left_job && !usage_error && can_restart(rank)) {
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

void Launcher::report_stuck(const std::vector<uint32_t>& ranks, const char* when) {
  report_endpoints(ranks, when);
  if (!options_.stacks_on_timeout) return;
  for (uint32_t r : ranks) {
    say("stacks of rank ", r, " (process group ", ranks_[r].pid,
        "):", proc::stacks_of_group(ranks_[r].pid));
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
    report_stuck(running, "at the timeout");
    set_exit_status(124);
    begin_terminate();
    return;
  }
  if (phase_ == Phase::kGrace && now >= grace_deadline_) {
    say(ranks_text(running), " still running ", seconds_text(options_.grace_seconds), " s after ",
        grace_reason_, "; sending SIGTERM, then SIGKILL after ", kKillDelay.count(), " s");
    // A rank that outlives a failure by the whole grace period is mostly
    // one that missed it: where it waits is the thing to know.
    report_stuck(running, "at the end of the grace period");
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
    if ((r & kSpareEvent) != 0) {
      // Written with its pid in one write(2), so the pid is there.
      uint32_t pid = 0;
      if (::read(silent_fd_, &pid, sizeof(pid)) == static_cast<ssize_t>(sizeof(pid)))
        on_spare_joined(r & ~kSpareEvent, pid);
      continue;
    }
    if (r >= ranks_.size() || !ranks_[r].running) continue;
    const bool spare = phase_ == Phase::kRunning && idle_spares() > 0;
    const bool again = spare || can_restart(ranks_[r]);
    say("rank ", r, " stopped heart-beating (no heartbeat for ", heartbeat_timeout_.count(),
        " ms; stopped or hung); killing it with SIGKILL",
        spare   ? "; a spare takes its place"
        : again ? ", to start it again"
                : "");
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
  log::info("every rank joined the job ", elapsed, " s after the launch; --kill, --stop and ",
            "--join count from now");
}

int Launcher::run() {
  start_ = Clock::now();
  joined_.assign(options_.ranks, false);
  for (const Fault& fault : options_.faults) {
    faults_.push_back(FaultState{fault, fault_text(fault)});
  }
  for (double at : options_.joins) joins_.push_back(JoinState{at, false});
  if (options_.timeout_seconds > 0) {
    job_deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.timeout_seconds));
  }
  if (!start_ranks() || !start_spares()) {
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
    on_spare_timers(Clock::now());
    const bool ranks_left = !running_ranks().empty() || restarts_pending() || spares_awaited();
    if (!ranks_left) end_spares(Clock::now());
    const bool others = others_running();
    if (!ranks_left && !others && !drain_deadline_) drain_deadline_ = Clock::now() + kDrainDelay;
    if (!ranks_left && !others && (!any_stream_open() || Clock::now() >= *drain_deadline_)) break;

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
      for (const Rank& r : ranks_) {
        if (r.restart_pending) {
          consider(r.restart_by);
          consider(r.restart_not_before);
        }
        if (r.awaiting_spare) consider(r.spare_by);
      }
      if (faults_clock_) {
        for (const FaultState& f : faults_) {
          if (f.step == FaultState::Step::kDue && due(f)) consider(*due(f));
          if (f.step == FaultState::Step::kToContinue) consider(f.continue_at);
        }
        for (const JoinState& j : joins_) {
          if (!j.started) consider(*faults_clock_ + after_seconds(j.at_seconds));
        }
      }
    } else if (others) {
      if (spares_kill_at_) consider(*spares_kill_at_);
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
    for_each_stream([&](Stream& s) {
      if (!s.fd.valid()) return;
      fds.push_back({s.fd.get(), POLLIN, 0});
      streams.push_back(&s);
    });
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
    on_joins(Clock::now());
  }
  for_each_stream([](Stream& s) { s.flush(); });
  report_faults_not_injected();
  report_joins_not_started();

  if (exit_status_) return *exit_status_;
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.2f",
                std::chrono::duration<double>(Clock::now() - start_).count());
  log::info("all ", options_.ranks, " ranks exited with status 0 after ", elapsed, " s");
  return 0;
}

}  // namespace sluice::tool::launch

namespace sluice::tool {
using namespace launch;

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
  registry_options.world_size = options.rank_numbers();
  registry_options.initial_ranks = options.ranks;
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
  if (options.restarts > 0 || options.spares > 0 || options.rank_numbers() > options.ranks ||
      !options.joins.empty()) {
    registry_options.on_lost_rank = [fd = silent_w.get()](uint32_t rank, bool left) {
      const uint32_t event = rank | kLostEvent | (left ? kLeftEvent : 0);
      (void)!::write(fd, &event, sizeof(event));
    };
  }
  if (!options.faults.empty() || options.spares > 0 || !options.joins.empty()) {
    // First incarnations: the job starts once, and faults count from then.
    // Later ones, with --spares: which process now is the rank.
    registry_options.on_joined = [fd = silent_w.get()](uint32_t rank, uint32_t incarnation,
                                                       uint32_t pid) {
      if (incarnation != 0) {
        const uint32_t event[2] = {rank | kSpareEvent, pid};
        (void)!::write(fd, event, sizeof(event));
        return;
      }
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
