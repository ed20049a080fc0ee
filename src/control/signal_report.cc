#include "control/signal_report.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "common/env.h"
#include "common/log.h"
#include "observe/counters_report.h"
#include "observe/endpoint_counters.h"

namespace sluice::control::signal_report {
namespace {

std::atomic<uint64_t> g_requests{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the handler needs a lock-free counter");

void on_sigusr1(int) { g_requests.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const auto v = detail::env::get("SLUICE_SIGUSR1"); v && *v == "0") return;
    struct sigaction old {};
    if (::sigaction(SIGUSR1, nullptr, &old) != 0) return;
    const bool is_default = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
    if (!is_default) {
      log::debug("SIGUSR1 has a handler already: no endpoint report on SIGUSR1");
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

uint64_t requests() { return g_requests.load(std::memory_order_relaxed); }

std::string report(uint32_t rank, const char* when,
                   const std::function<std::string(uint32_t)>& host_of) {
  namespace ctr = detail::counters;
  const std::vector<ctr::Reading> endpoints = ctr::snapshot(rank);
  const auto open = std::count_if(endpoints.begin(), endpoints.end(), ctr::open_flow_endpoint);
  std::string out =
      log::cat("sluice[", rank, "] report ", when, ": rank ", rank, " (pid ", ::getpid(), ") has ",
               endpoints.size(), " endpoint(s), ", open, " flow endpoint(s) not ended\n");
  for (const std::string& line : ctr::report_lines(endpoints, ctr::now_ns(), host_of, false)) {
    out += line + "\n";
  }
  return out;
}

}  // namespace sluice::control::signal_report
