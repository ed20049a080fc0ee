// `sluice run --kill RANK@SECONDS` and `--stop RANK@SECONDS:DURATION`:
// reading, checking and writing the faults (run.h), and the launcher's
// injecting them (launcher.h).
#include <time.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/log.h"
#include "launcher.h"
#include "run.h"

namespace sluice::tool {
namespace {

// `text` as a finite number, the whole of it (std::from_chars: no '+', no
// spaces; "inf" and "nan" are refused here).
std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const char* const last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec != std::errc() || end != last || !std::isfinite(value))
    return std::nullopt;
  return value;
}

}  // namespace

std::optional<Fault> parse_fault(Fault::Kind kind, std::string_view text, std::string* error) {
  const bool stop = kind == Fault::Kind::kStop;
  const char* option = stop ? "--stop" : kind == Fault::Kind::kLeave ? "--leave" : "--kill";
  const auto fail = [&](const std::string& why) -> std::optional<Fault> {
    if (error) {
      *error =
          log::cat(option, " '", text, "': ", why, "; expected ",
                   stop ? "RANK@SECONDS:DURATION (e.g. 1@0.3:0.5)" : "RANK@SECONDS (e.g. 2@1.5)",
                   ", SECONDS counted from when every rank has joined the job, or ",
                   stop ? "RANK@SECONDS:DURATION" : "RANK@SECONDS",
                   " after TEXT, from the first line a rank prints that contains TEXT");
    }
    return std::nullopt;
  };
  const size_t at = text.find('@');
  if (at == std::string_view::npos) return fail("no '@'");
  Fault fault;
  fault.kind = kind;
  const std::string_view rank_text = text.substr(0, at);
  const auto [rank_end, rank_ec] =
      std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), fault.rank);
  if (rank_text.empty()) return fail("no RANK before '@'");
  if (rank_ec != std::errc() || rank_end != rank_text.data() + rank_text.size())
    return fail(log::cat("RANK '", rank_text, "' is not a rank number (0, 1, ...)"));
  std::string_view when = text.substr(at + 1);
  constexpr std::string_view kAfter = " after ";
  const size_t after = when.find(kAfter);
  if (after != std::string_view::npos) {
    fault.after = when.substr(after + kAfter.size());
    if (fault.after.empty()) return fail("no TEXT after ' after '");
    when = when.substr(0, after);
  }
  std::string_view duration;
  const size_t colon = when.find(':');
  if (stop) {
    if (colon == std::string_view::npos) return fail("no ':DURATION' after SECONDS");
    duration = when.substr(colon + 1);
    when = when.substr(0, colon);
  } else if (colon != std::string_view::npos) {
    return fail("a ':DURATION' is for --stop only");
  }
  const std::optional<double> seconds = parse_number(when);
  if (!seconds || *seconds < 0)
    return fail(log::cat("SECONDS '", when, "' is not a number of seconds >= 0"));
  fault.at_seconds = *seconds;
  if (stop) {
    const std::optional<double> length = parse_number(duration);
    if (!length || *length <= 0)
      return fail(log::cat("DURATION '", duration, "' is not a number of seconds > 0"));
    fault.duration_seconds = *length;
  }
  return fault;
}

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", seconds);
  return buf;
}

std::string check_faults(const RunOptions& options) {
  if (options.max_ranks != 0 && options.max_ranks < options.ranks) {
    return log::cat("--max-ranks ", options.max_ranks, " is below -n ", options.ranks,
                    ": it counts every rank number the job may have, the first ", options.ranks,
                    " included");
  }
  for (double at : options.joins) {
    if (!(at >= 0) || !std::isfinite(at))
      return log::cat("--join ", at, ": the time must be a number of seconds >= 0");
  }
  std::vector<bool> armed(options.ranks, false);
  for (const KillAt& k : options.kill_at) {
    if (k.rank >= options.ranks) {
      return log::cat("--kill-at ", k.rank, ":", k.name, ": there is no rank ", k.rank,
                      " in a job of ", options.ranks, " ranks (0..", options.ranks - 1, ")");
    }
    if (armed[k.rank]) {
      return log::cat("--kill-at ", k.rank, ":", k.name, ": rank ", k.rank,
                      " already has a kill point (one per rank)");
    }
    armed[k.rank] = true;
  }
  if (!options.faults_after.empty() && options.faults.empty() && options.joins.empty()) {
    return log::cat("--faults-after '", options.faults_after,
                    "' starts the clock of --kill, --stop and --join, and there is none");
  }
  for (const Fault& fault : options.faults) {
    const uint32_t n = options.rank_numbers();
    if (fault.rank >= n) {
      return log::cat(fault_text(fault), ": there is no rank ", fault.rank, " in a job of ", n,
                      " ranks (0..", n - 1, ")");
    }
    if (!(fault.at_seconds >= 0) || !std::isfinite(fault.at_seconds))
      return log::cat(fault_text(fault), ": the time must be a number of seconds >= 0");
    if (fault.kind == Fault::Kind::kStop &&
        (!(fault.duration_seconds > 0) || !std::isfinite(fault.duration_seconds))) {
      return log::cat(fault_text(fault), ": the duration must be a number of seconds > 0");
    }
  }
  return "";
}

std::optional<KillAt> parse_kill_at(std::string_view text, std::string* error) {
  const std::string bad =
      log::cat("--kill-at '", text, "': expected RANK:NAME[:K] (e.g. 1:kv-after-accept:40)");
  KillAt k;
  const size_t first = text.find(':');
  if (first == std::string_view::npos) {
    *error = bad + ", found no ':'";
    return std::nullopt;
  }
  const std::string_view rank = text.substr(0, first);
  std::string_view rest = text.substr(first + 1);
  const size_t second = rest.find(':');
  std::string_view pass;
  if (second != std::string_view::npos) {
    pass = rest.substr(second + 1);
    rest = rest.substr(0, second);
  }
  const auto number = [](std::string_view digits, uint64_t max, uint64_t* out) {
    if (digits.empty() || digits.size() > 18) return false;
    uint64_t v = 0;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') return false;
      v = v * 10 + static_cast<uint64_t>(ch - '0');
    }
    *out = v;
    return v <= max;
  };
  uint64_t r = 0;
  if (!number(rank, UINT32_MAX, &r)) {
    *error = bad + ", RANK is not a number";
    return std::nullopt;
  }
  const bool name_ok = !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '.' || ch == '_' || ch == '-';
  });
  if (!name_ok) {
    *error = bad + ", NAME must be letters, digits, '.', '_' or '-'";
    return std::nullopt;
  }
  if (second != std::string_view::npos &&
      (!number(pass, UINT64_MAX / 10, &k.pass) || k.pass == 0)) {
    *error = bad + ", K is not a number >= 1";
    return std::nullopt;
  }
  k.rank = static_cast<uint32_t>(r);
  k.name = rest;
  return k;
}

std::string realtime_text() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%lld.%06ld", static_cast<long long>(ts.tv_sec),
                ts.tv_nsec / 1000);
  return buf;
}

std::string fault_text(const Fault& fault) {
  const std::string after = fault.after.empty() ? "" : log::cat(" after '", fault.after, "'");
  if (fault.kind != Fault::Kind::kStop) {
    return log::cat(fault.kind == Fault::Kind::kKill ? "--kill " : "--leave ", fault.rank, "@",
                    seconds_text(fault.at_seconds), after);
  }
  return log::cat("--stop ", fault.rank, "@", seconds_text(fault.at_seconds), ":",
                  seconds_text(fault.duration_seconds), after);
}

}  // namespace sluice::tool

namespace sluice::tool::launch {

// --faults-after: the first line of any rank that contains the text starts
// the faults' clock (a line may come before the launcher has read every
// rank's join: both arrive through pipes it reads in one loop). Then a
// fault "after TEXT" starts its own clock at the first line containing its
// text (the same line may do both).
void Launcher::on_rank_line(std::string_view line) {
  if (!faults_clock_ && !options_.faults_after.empty() &&
      line.find(options_.faults_after) != std::string_view::npos) {
    faults_clock_ = Clock::now();
    say("a rank printed '", options_.faults_after, "'; --kill, --stop and --join count from now");
  }
  if (!faults_clock_) return;
  for (FaultState& f : faults_) {
    if (f.fault.after.empty() || f.clock || line.find(f.fault.after) == std::string_view::npos)
      continue;
    f.clock = Clock::now();
    say("a rank printed '", f.fault.after, "'; ", f.text, " counts from now");
  }
}

std::optional<Clock::time_point> Launcher::due(const FaultState& f) const {
  if (!faults_clock_) return std::nullopt;
  if (f.fault.after.empty()) return *faults_clock_ + after_seconds(f.fault.at_seconds);
  if (!f.clock) return std::nullopt;
  return *f.clock + after_seconds(f.fault.at_seconds);
}

void Launcher::on_faults(Clock::time_point now) {
  if (!faults_clock_) return;
  for (FaultState& f : faults_) {
    Rank& rank = ranks_[f.fault.rank];
    const uint32_t r = rank.index;
    const std::optional<Clock::time_point> at = due(f);
    if (f.step == FaultState::Step::kDue && at && now >= *at) {
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
      if (f.fault.kind == Fault::Kind::kLeave) {
        say("asking rank ", r, " to leave (", f.text, "): SIGTERM to pid ", rank.pid, ", at ",
            realtime_text());
        signal_rank(rank, SIGTERM);
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
    if (faults_clock_ && !f.fault.after.empty() && !f.clock) {
      say(f.text, " was not injected: no rank printed a line containing '", f.fault.after, "'");
    } else if (faults_clock_) {
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

}  // namespace sluice::tool::launch
