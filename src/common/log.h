// Logging to stderr with a level. The level is ClusterOptions::log_level
// (whose environment twin, SLUICE_LOG, only ClusterOptions::from_env() reads
// and checks): join() sets it, and a program that never joins (the sluice
// tools) sets it the same way at start. Until then it is warn, so that
// warnings and errors are never lost. Quiet on the data path: nothing here is
// called per record.
//
// Thread safety: every function may be called from any thread; lines are
// written whole.
#pragma once

#include <sstream>
#include <string>

#include "sluice/options.h"

namespace sluice::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level in force: warn until set_level().
Level level();
void set_level(Level level);
// The level of ClusterOptions::log_level (the two enums agree value for value).
void set_level(LogLevel level);

// Writes "sluice[<rank or pid>] <level>: <message>\n" if `level` is enabled.
void write(Level level, const std::string& message);
// Sets the tag printed after "sluice" (the rank once it is known).
void set_tag(const std::string& tag);

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class... Args>
void error(const Args&... args) {
  if (level() >= Level::kError) write(Level::kError, cat(args...));
}
template <class... Args>
void warn(const Args&... args) {
  if (level() >= Level::kWarn) write(Level::kWarn, cat(args...));
}
template <class... Args>
void info(const Args&... args) {
  if (level() >= Level::kInfo) write(Level::kInfo, cat(args...));
}
template <class... Args>
void debug(const Args&... args) {
  if (level() >= Level::kDebug) write(Level::kDebug, cat(args...));
}

}  // namespace sluice::log
