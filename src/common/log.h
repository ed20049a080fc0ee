// Logging to stderr with a level: ClusterOptions::log_level, set by join();
// before any join, SLUICE_LOG's (error, warn, info, debug; default warn). Quiet on the data path: nothing here is called per record.
//
// Thread safety: every function may be called from any thread; lines are
// written whole.
#pragma once

#include <sstream>
#include <string>

namespace sluice::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level in force (SLUICE_LOG's until set_level(), read once on first use).
Level level();
void set_level(Level level);
// Parses "error", "warn", "info" or "debug"; false if it is none of them.
bool parse_level(const std::string& text, Level* out);

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
void error(const Args&... args) { if (level() >= Level::kError) write(Level::kError, cat(args...)); }
template <class... Args>
void warn(const Args&... args) { if (level() >= Level::kWarn) write(Level::kWarn, cat(args...)); }
template <class... Args>
void info(const Args&... args) { if (level() >= Level::kInfo) write(Level::kInfo, cat(args...)); }
template <class... Args>
void debug(const Args&... args) { if (level() >= Level::kDebug) write(Level::kDebug, cat(args...)); }

}  // namespace sluice::log
