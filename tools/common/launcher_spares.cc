// `sluice run --spares K`: processes of the program that wait in the job,
// without a rank, until one dies; the registry (control/registry_server.h)
// gives the spare that waited longest the died rank's place, and the
// launcher then counts that process as the rank. `sluice run --join S`:
// processes started later that the registry gives a free rank number (an
// elastic job's vacancy, or a rank that left), counted the same way.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <string>
#include <utility>

#include "launcher.h"

namespace sluice::tool::launch {
namespace {

// How long the launcher waits for a replaced rank's process to become a
// zombie before it kills it.
constexpr auto kExitWait = std::chrono::milliseconds(200);

}  // namespace

bool Launcher::start_spares() {
  spares_.resize(options_.spares);
  next_spare_ = options_.spares;
  for (uint32_t i = 0; i < options_.spares; ++i) {
    spares_[i].index = i;
    spares_[i].spare = true;
    if (!start_rank(spares_[i])) return false;
  }
  if (options_.spares > 0) {
    log::info("started ", options_.spares, " spare(s): each takes the place of a rank that dies");
  }
  return true;
}

void Launcher::on_joins(Clock::time_point now) {
  if (!faults_clock_) return;
  for (JoinState& j : joins_) {
    if (j.started || now < *faults_clock_ + after_seconds(j.at_seconds)) continue;
    j.started = true;
    if (phase_ != Phase::kRunning) {
      say("--join ", seconds_text(j.at_seconds), " skipped: the job is ending");
      continue;
    }
    Rank joiner;
    joiner.index = next_joiner_++;
    joiner.spare = true;
    joiner.joiner = true;
    spares_.push_back(std::move(joiner));
    if (!start_rank(spares_.back())) {
      spares_.pop_back();
      continue;
    }
    say("--join ", seconds_text(j.at_seconds), ": started joiner ", spares_.back().index, " (pid ",
        spares_.back().pid, "); it takes a free rank number of the running job");
  }
}

void Launcher::report_joins_not_started() const {
  for (const JoinState& j : joins_) {
    if (!j.started)
      say("--join ", seconds_text(j.at_seconds), " was not started: the job ended first");
  }
}

void Launcher::on_spare_joined(uint32_t rank, uint32_t pid) {
  auto it = std::find_if(spares_.begin(), spares_.end(), [pid](const Rank& s) {
    return s.running && s.pid == static_cast<pid_t>(pid);
  });
  // A restarted process (--restarts) rejoins the same way: nothing to move.
  if (it == spares_.end() || rank >= ranks_.size()) return;
  Rank& slot = ranks_[rank];
  if (slot.running && it->joiner && slot.left_job) {
    // A rank that left (Cluster::leave) and has not exited yet: it may
    // finish on its own; it is reaped as a replaced process.
    say("joiner ", it->index, " takes the number of rank ", rank,
        ", which left the job; its process (pid ", slot.pid, ") may still finish");
  } else if (slot.running) {
    // The registry saw the connection close before the launcher reaped the
    // process (a dying process closes its files before it becomes a zombie),
    // or it declared a stopped or hung process lost (which the launcher
    // killed at once: on_silent_ranks). Either ends within moments.
    int status = 0;
    bool ended = false;
    const Clock::time_point give_up = Clock::now() + kExitWait;
    while (!(ended = reaped(slot, &status)) && Clock::now() < give_up) ::usleep(1000);
    if (ended) {
      slot.running = false;
      slot.out.pump();
      slot.err.pump();
      say("rank ", rank, " ", ended_text(slot, status), "; a spare takes its place");
    } else {
      say("rank ", rank, " (pid ", slot.pid,
          ") was declared lost; killing it with SIGKILL; a spare takes its place");
      signal_rank(slot, SIGKILL);
      slot.signalled = true;
    }
  }
  if (slot.restart_pending) say("rank ", rank, " is not started again: a spare took its place");
  if (it->joiner) {
    say("joiner ", it->index, " (pid ", pid, ") joined the running job as rank ", rank);
  } else if (slot.awaiting_spare) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - slot.failed_at);
    say("spare ", it->index, " (pid ", pid, ") took the place of rank ", rank, ", ", ms.count(),
        " ms after its process ended");
  } else {
    say("spare ", it->index, " (pid ", pid, ") took the place of rank ", rank);
  }
  Rank taken;
  taken.index = rank;
  taken.restarts = slot.restarts;
  taken.replaced = slot.replaced + 1;
  taken.pid = it->pid;
  taken.running = true;
  taken.out = std::move(it->out);
  taken.err = std::move(it->err);
  for (Stream* s : {&taken.out, &taken.err}) s->prefix = log::cat("[", rank, "] ");
  // The old process, if it still runs or its output still drains, is
  // reaped and read to its end as a replaced one; its status never counts.
  if (slot.running || slot.out.fd.valid() || slot.err.fd.valid()) {
    slot.spare = false;
    retired_.push_back(std::move(slot));
  }
  const bool joiner = it->joiner;
  slot = std::move(taken);
  spares_.erase(it);
  if (!joiner) replenish_spare(slot);
}

void Launcher::replenish_spare(Rank& rank) {
  if (options_.restarts == 0) return;
  if (!can_restart(rank)) {  // (it says why if the restart rate refuses)
    if (rank.restarts >= options_.restarts) {
      say("no new spare replaces the one rank ", rank.index, " took: its ", options_.restarts,
          " restart(s) are used");
    }
    return;
  }
  ++rank.restarts;
  const Clock::time_point now = Clock::now();
  const Clock::duration delay = restart_policy_.record(rank.restarts, now);
  spare_starts_.push_back(now + delay);
  say("starting a new spare in place of the one rank ", rank.index, " took (restart ",
      rank.restarts, " of ", options_.restarts, ")",
      delay > Clock::duration::zero()
          ? log::cat(" in ", seconds_text(std::chrono::duration<double>(delay).count()), " s")
          : "");
}

void Launcher::on_spare_timers(Clock::time_point now) {
  for (auto due = spare_starts_.begin(); due != spare_starts_.end();) {
    if (phase_ == Phase::kRunning && now < *due) {
      ++due;
      continue;
    }
    due = spare_starts_.erase(due);
    if (phase_ != Phase::kRunning) continue;  // the job is ending: no new process
    Rank spare;
    spare.index = next_spare_++;
    spare.spare = true;
    spares_.push_back(std::move(spare));
    if (!start_rank(spares_.back())) {
      say("a new spare could not be started");
      spares_.pop_back();
    }
  }
  for (Rank& r : ranks_) {
    if (!r.awaiting_spare || (phase_ == Phase::kRunning && now < r.spare_by)) continue;
    r.awaiting_spare = false;
    if (phase_ == Phase::kRunning) {
      say("no spare took the place of rank ", r.index, " within ",
          std::chrono::duration_cast<std::chrono::seconds>(
              std::max<Clock::duration>(kSpareWait, 2 * heartbeat_timeout_))
              .count(),
          " s");
    }
    on_exit(r, r.failed_status, /*spares_ok=*/false);
  }
}

void Launcher::end_spares(Clock::time_point now) {
  if (spares_kill_at_) {
    if (now < *spares_kill_at_) return;
    for (Rank& s : spares_) {
      if (s.running) signal_rank(s, SIGKILL);
    }
    for (Rank& s : retired_) {
      if (s.running) signal_rank(s, SIGKILL);
    }
    spares_kill_at_ = Clock::time_point::max();
    return;
  }
  std::vector<uint32_t> waiting;
  for (Rank& s : spares_) {
    if (!s.running) continue;
    waiting.push_back(s.index);
    signal_rank(s, SIGTERM);
    s.signalled = true;
  }
  if (waiting.empty()) return;
  say("every rank exited; ending spare(s) ", rank_list(waiting),
      ", which no rank needed, with SIGTERM");
  spares_kill_at_ = now + kKillDelay;
}

void Launcher::reap_others() {
  for (std::vector<Rank>* list : {&spares_, &retired_}) {
    for (Rank& r : *list) {
      int status = 0;
      if (!r.running || !reaped(r, &status)) continue;
      r.running = false;
      r.out.pump();
      r.err.pump();
      // Neither counts against the exit status: a spare that never took a
      // place was no rank, and a replaced process's failure was made up for.
      if (list == &retired_) {
        log::info("the replaced process of rank ", r.index, " (pid ", r.pid, ") ended");
      } else if (!r.signalled) {
        if (WIFEXITED(status)) {
          say("spare ", r.index, " (pid ", r.pid, ") exited with status ", WEXITSTATUS(status),
              " before a rank needed it");
        } else {
          say("spare ", r.index, " (pid ", r.pid, ") was killed by signal ", WTERMSIG(status),
              " before a rank needed it");
        }
      }
    }
  }
}

bool Launcher::others_running() const {
  const auto running = [](const Rank& r) { return r.running; };
  return std::any_of(spares_.begin(), spares_.end(), running) ||
         std::any_of(retired_.begin(), retired_.end(), running);
}

}  // namespace sluice::tool::launch
