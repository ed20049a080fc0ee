// `sluice run --kill RANK@SECONDS` and `--stop RANK@SECONDS:DURATION`:
// reading, checking and writing the faults (run.h); the launcher injects them.
#include <time.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "common/log.h"
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
  const auto fail = [&](const std::string& why) -> std::optional<Fault> {
    if (error) {
      *error =
          log::cat(stop ? "--stop" : "--kill", " '", text, "': ", why, "; expected ",
                   stop ? "RANK@SECONDS:DURATION (e.g. 1@0.3:0.5)" : "RANK@SECONDS (e.g. 2@1.5)",
                   ", SECONDS counted from when every rank has joined the job");
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
  if (!options.faults_after.empty() && options.faults.empty()) {
    return log::cat("--faults-after '", options.faults_after,
                    "' starts the clock of --kill and --stop, and there is neither");
  }
  for (const Fault& fault : options.faults) {
    if (fault.rank >= options.ranks) {
      return log::cat(fault_text(fault), ": there is no rank ", fault.rank, " in a job of ",
                      options.ranks, " ranks (0..", options.ranks - 1, ")");
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

std::string realtime_text() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%lld.%06ld", static_cast<long long>(ts.tv_sec),
                ts.tv_nsec / 1000);
  return buf;
}

std::string fault_text(const Fault& fault) {
  if (fault.kind == Fault::Kind::kKill)
    return log::cat("--kill ", fault.rank, "@", seconds_text(fault.at_seconds));
  return log::cat("--stop ", fault.rank, "@", seconds_text(fault.at_seconds), ":",
                  seconds_text(fault.duration_seconds));
}

}  // namespace sluice::tool
