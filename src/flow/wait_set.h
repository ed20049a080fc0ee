// What a Worker (sluice/worker.h) parks on: the futex words of its shm
// endpoints and the ofi endpoints among them. Filled by Waitable::arm()
// each time the worker parks; the vectors keep their capacity, so parking
// allocates nothing once a worker has parked once.
//
// Thread safety: owned by one Worker, used by its thread.
#pragma once

#include <poll.h>

#include <chrono>
#include <vector>

#include "common/futex.h"
#include "sluice/flow.h"

namespace sluice::detail {

namespace ofi {
class Endpoint;
}

struct WaitSet {
  struct Ofi {
    Waitable* core;     // blocks alone on the endpoint's queue
    ofi::Endpoint* ep;  // its wait fd, for several at once
  };
  std::vector<FutexWaiter> words;  // shm: sleep while each holds its value
  std::vector<Ofi> ofi;            // ofi endpoints: their completion queues
  std::vector<pollfd> fds;         // scratch for sleep()
  // The earliest time an endpoint must be asked again even if nothing
  // changes (a source that will stop waiting for a full target then).
  Deadline wake = kForever;

  void clear() {
    words.clear();
    ofi.clear();
    wake = kForever;
  }
  void wake_at(Deadline d) { wake = d < wake ? d : wake; }
  void reserve(size_t n) {
    words.reserve(n);
    ofi.reserve(n);
    fds.reserve(n);
  }
  void add_word(std::atomic<uint32_t>* word, uint32_t expected) {
    words.push_back({word, expected});
  }
  void add_ofi(Waitable* core, ofi::Endpoint* ep) { ofi.push_back({core, ep}); }

  // Sleeps until a word changes or an ofi endpoint has completions, at most
  // `timeout` (rounded up to a millisecond where a completion queue is
  // waited on, so that a short wait still sleeps). One system call waits:
  // - only words: futex_waitv on all of them;
  // - one ofi endpoint and no words: its completion queue (fi_cq_sread);
  // - several ofi endpoints and no words: poll(2) on their wait fds, after
  //   fi_trywait on each (returns at once if one has completions pending);
  // - words and ofi endpoints together, or an endpoint without a wait fd:
  //   futex words and completion queues cannot share a system call, so it
  //   sleeps at most `mixed_slice` (on the words, if any) and the caller
  //   polls again.
  void sleep(std::chrono::nanoseconds timeout, std::chrono::milliseconds mixed_slice);
};

// The ofi sources a Worker drives between the calls that name them
// (SourceCore::drive). A source on the list points back at it, so that
// whichever of the two goes first takes itself off: a destroyed source
// leaves the list, a destroyed list clears its sources' pointers. Held by
// the Worker through a pointer, so that moving the Worker moves nothing
// the sources point at.
struct DrivenSources {
  std::vector<SourceCore*> sources;

  DrivenSources() = default;
  DrivenSources(const DrivenSources&) = delete;
  DrivenSources& operator=(const DrivenSources&) = delete;
  ~DrivenSources();

  // Puts `s` on this list (taking it off another Worker's), if it is a
  // source that may need driving.
  void add(SourceCore* s);
  void remove(SourceCore* s);
  // Drives every source once; those with nothing left leave the list.
  void drive();
  // True while a closed source's last transfers have not completed.
  bool delivering() const;
};

}  // namespace sluice::detail
