#include "transport/ofi/progress_agent.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "transport/ofi/ofi.h"

namespace sluice::detail::ofi {

namespace {
// How often the agent looks: every 200 us for a while after it last moved
// an endpoint on (a thread waits on one flow for what another's steps
// bring: each step then waits about a look), else every 10 ms while
// some endpoint has operations outstanding (their owners mostly call them
// themselves; a wake-up a millisecond would take a core from a spinning
// thread on a small host), else every 50 ms.
constexpr std::chrono::microseconds kHelpingTick{200};
constexpr std::chrono::milliseconds kHelpingFor{200};
constexpr std::chrono::milliseconds kBusyTick{10};
constexpr std::chrono::milliseconds kIdleTick{50};

// Set once the agent is destroyed; constant-initialised, so it outlives it.
std::atomic<bool> agent_gone{false};
}  // namespace

ProgressAgent& ProgressAgent::instance() {
  // Destroyed at exit before libfabric's own destructors (registered after
  // the library was loaded), so the thread is gone before libfabric is.
  static ProgressAgent agent;
  return agent;
}

ProgressAgent::~ProgressAgent() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  agent_gone.store(true, std::memory_order_release);
}

void ProgressAgent::add(Endpoint* ep) {
  if (!agent_gone.load(std::memory_order_acquire)) instance().watch(ep);
}

void ProgressAgent::remove(Endpoint* ep) {
  if (!agent_gone.load(std::memory_order_acquire)) instance().unwatch(ep);
}

void ProgressAgent::watch(Endpoint* ep) {
  MutexLock lock(mu_);
  watched_.push_back({ep, ep->calls()});
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
  changed_.notify_all();
}

void ProgressAgent::unwatch(Endpoint* ep) {
  MutexLock lock(mu_);  // the loop holds it while it touches an endpoint
  watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                [ep](const Watched& w) { return w.ep == ep; }),
                 watched_.end());
}

void ProgressAgent::loop() {
  // The provider may allocate on this thread: take its malloc arena now, at
  // the first endpoint, rather than at some later progress (a process's
  // mappings then stay flat across flows; the lifecycle tests check it).
  void* volatile first = std::malloc(64);  // volatile: not elided with its free
  std::free(first);
  MutexLock lock(mu_);
  std::chrono::steady_clock::time_point helping_until{};
  while (!stopping_) {
    if (watched_.empty()) {
      changed_.wait(lock);
      continue;
    }
    bool busy = false;
    const auto now = std::chrono::steady_clock::now();
    for (Watched& w : watched_) {
      const uint64_t calls = w.ep->calls();
      if (w.ep->outstanding()) {
        busy = true;
        // The owner made no call since the last look: it is elsewhere.
        if (calls == w.calls_seen && w.ep->progress_if_idle()) helping_until = now + kHelpingFor;
      }
      w.calls_seen = calls;
    }
    changed_.wait_for(lock, now < helping_until ? kHelpingTick : busy ? kBusyTick : kIdleTick);
  }
}

}  // namespace sluice::detail::ofi
