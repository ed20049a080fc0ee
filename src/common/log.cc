#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>

#include "common/mutex.h"

namespace sluice::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kWarn)};
Mutex g_tag_mu;
std::string g_tag SLUICE_GUARDED_BY(g_tag_mu);

const char* name(Level l) {
  switch (l) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warn";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "?";
}

}  // namespace

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

static_assert(static_cast<int>(LogLevel::kError) == static_cast<int>(Level::kError) &&
              static_cast<int>(LogLevel::kWarn) == static_cast<int>(Level::kWarn) &&
              static_cast<int>(LogLevel::kInfo) == static_cast<int>(Level::kInfo) &&
              static_cast<int>(LogLevel::kDebug) == static_cast<int>(Level::kDebug));

void set_level(LogLevel l) { set_level(static_cast<Level>(l)); }

void set_tag(const std::string& tag) {
  MutexLock lock(g_tag_mu);
  g_tag = tag;
}

void write(Level l, const std::string& message) {
  std::string tag;
  {
    MutexLock lock(g_tag_mu);
    tag = g_tag.empty() ? "pid " + std::to_string(::getpid()) : g_tag;
  }
  std::string line = "sluice[" + tag + "] " + name(l) + ": " + message + "\n";
  // One write(2) per line so that lines from threads and processes sharing
  // stderr never interleave mid-line.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sluice::log
