// sluice::kill_point (sluice/job.h): a deterministic crash at a marked place,
// armed from outside by `sluice run --kill-at` through SLUICE_TEST_KILL_AT.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "sluice/job.h"

namespace sluice {
namespace {

// SLUICE_TEST_KILL_AT=NAME[:K] as read once; `name` empty: not armed. A
// malformed value arms nothing and says so, once.
struct Armed {
  std::string name;
  uint64_t pass = 1;
  std::atomic<uint64_t> passes{0};

  Armed() {
    const char* v = std::getenv("SLUICE_TEST_KILL_AT");
    if (v == nullptr || *v == '\0') return;
    std::string_view text(v);
    const size_t colon = text.rfind(':');
    std::string_view count;
    if (colon != std::string_view::npos) {
      count = text.substr(colon + 1);
      text = text.substr(0, colon);
    }
    uint64_t k = count.empty() ? 1 : 0;
    bool ok = !text.empty() && (colon == std::string_view::npos || !count.empty());
    for (char ch : count) {
      if (ch < '0' || ch > '9' || k > UINT64_MAX / 10 - 1) {
        ok = false;
        break;
      }
      k = k * 10 + static_cast<uint64_t>(ch - '0');
    }
    if (!ok || k == 0) {
      const std::string line = "sluice: SLUICE_TEST_KILL_AT='" + std::string(v) +
                               "' is not NAME or NAME:K (K >= 1); no kill point is armed\n";
      (void)!::write(STDERR_FILENO, line.data(), line.size());
      return;
    }
    name = text;
    pass = k;
  }
};

Armed& armed() {
  static Armed a;
  return a;
}

}  // namespace

void kill_point(std::string_view name) {
  Armed& a = armed();
  if (a.name.empty() || name != a.name) return;
  const uint64_t n = a.passes.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n != a.pass) return;
  // One write(2), so that the line is whole in the launcher's output and no
  // buffer of the dying process holds it.
  const std::string line = "sluice: kill point '" + std::string(name) + "' reached (pass " +
                           std::to_string(n) + "): SIGKILL to this process (SLUICE_TEST_KILL_AT)\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL cannot be caught; this thread goes no further meanwhile
}

}  // namespace sluice
