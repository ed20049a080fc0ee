#include "common/log.h"

#include "common/env.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace sluice::log {
namespace {

std::atomic<int> g_level{-1};
std::mutex g_tag_mu;
std::string g_tag;

const char* name(Level l) {
  switch (l) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
  }
  return "?";
}

}  // namespace

bool parse_level(const std::string& text, Level* out) {
  for (Level l : {Level::kError, Level::kWarn, Level::kInfo, Level::kDebug}) {
    if (text == name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l >= 0) return static_cast<Level>(l);
  Level parsed = Level::kWarn;
  // Until a join() sets the level from its options: SLUICE_LOG's, so that
  // programs that never join (the sluice tool's registry) honour it too.
  if (const auto env = detail::env::get("SLUICE_LOG")) {
    if (!parse_level(*env, &parsed)) {
      std::fprintf(stderr, "sluice: warn: SLUICE_LOG='%s' is not one of error, warn, info, debug; using warn\n",
                   env->c_str());
      parsed = Level::kWarn;
    }
  }
  g_level.store(static_cast<int>(parsed), std::memory_order_relaxed);
  return parsed;
}

void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

void set_tag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(g_tag_mu);
  g_tag = tag;
}

void write(Level l, const std::string& message) {
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(g_tag_mu);
    tag = g_tag.empty() ? "pid " + std::to_string(::getpid()) : g_tag;
  }
  std::string line = "sluice[" + tag + "] " + name(l) + ": " + message + "\n";
  // One write(2) per line so that lines from threads and processes sharing
  // stderr never interleave mid-line.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sluice::log
