// ProgressAgent: moves the transfers of ofi endpoints that nobody else is
// moving. On a provider with manual data progress (tcp;ofi_rxm, efa) a
// large message goes in steps (rendezvous: request, the peer's read, the
// acknowledgement; SAR: segment after segment), and each step happens only
// while the sending process reads that endpoint's completion queue. A flow
// has an endpoint per end, so a thread that pushed a segment into one flow
// and then waits on another (a request and its answer: the latency mode of
// `sluice perf`, any ping-pong) never came back to the first: with records
// past the provider's eager size (16 KiB on tcp;ofi_rxm) both ranks waited
// for ever. Small messages go whole and never needed it.
//
// The agent's one thread looks at the registered endpoints from time to
// time (progress_agent.cc: every 10 ms while any has operations
// outstanding, every 200 us for a while after it had to help): an
// endpoint with some whose owner made no call on it since the last look is
// progressed once (Endpoint::progress_if_idle, which never waits for the
// owner). It reads no completion: they stay for the owner, so no flow
// state is touched from this thread.
//
// Thread safety: add() and remove() may be called from any thread.
#pragma once

#include <condition_variable>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace sluice::detail::ofi {

class Endpoint;

class ProgressAgent {
 public:
  // The process's agent starts watching `ep` (its thread starts with the
  // first). REQUIRES: remove(ep) before ep is destroyed.
  static void add(Endpoint* ep);
  // Stops watching `ep`; when it returns, the agent no longer touches it.
  // After the agent itself was destroyed (static destruction at exit: an
  // endpoint owned by a longer-lived static), does nothing.
  static void remove(Endpoint* ep);

  // Stops and joins the thread (at process exit).
  ~ProgressAgent();
  ProgressAgent(const ProgressAgent&) = delete;
  ProgressAgent& operator=(const ProgressAgent&) = delete;

 private:
  ProgressAgent() = default;
  static ProgressAgent& instance();
  void watch(Endpoint* ep) SLUICE_EXCLUDES(mu_);
  void unwatch(Endpoint* ep) SLUICE_EXCLUDES(mu_);
  void loop() SLUICE_EXCLUDES(mu_);

  struct Watched {
    Endpoint* ep;
    uint64_t calls_seen;  // the owner's call count at the last look
  };
  mutable Mutex mu_;
  std::condition_variable_any changed_;
  std::vector<Watched> watched_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::detail::ofi
