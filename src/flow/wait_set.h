// What a Worker (sluice/worker.h) parks on: the futex words of its shm
// endpoints and the ofi endpoints among them. Filled by Waitable::arm()
// each time the worker parks; the vectors keep their capacity, so parking
// allocates nothing once a worker has parked once.
//
// Thread safety: owned by one Worker, used by its thread.
#pragma once

#include <chrono>
#include <vector>

#include "common/futex.h"
#include "sluice/flow.h"

namespace sluice::detail {

struct WaitSet {
  std::vector<FutexWaiter> words;  // shm: sleep while each holds its value
  std::vector<Waitable*> ofi;      // ofi endpoints: their completion queues

  void clear() {
    words.clear();
    ofi.clear();
  }
  void add_word(std::atomic<uint32_t>* word, uint32_t expected) {
    words.push_back({word, expected});
  }
  void add_ofi(Waitable* w) { ofi.push_back(w); }

  // Sleeps until a word changes or an ofi endpoint has completions, at most
  // `timeout`. Futex words and completion queues cannot be waited on in one
  // system call: with only words, one futex_waitv; with exactly one ofi
  // endpoint and no words, its completion queue; otherwise words (or
  // nothing) for at most `mixed_slice`, after which the caller polls again.
  void sleep(std::chrono::nanoseconds timeout, std::chrono::milliseconds mixed_slice) const {
    if (ofi.empty()) {
      futex_wait_any(words.data(), words.size(), timeout);
      return;
    }
    const auto slice = std::min<std::chrono::nanoseconds>(timeout, mixed_slice);
    if (words.empty() && ofi.size() == 1) {
      // The caller bounds `timeout` by its park slice; rounded up, so that a
      // wait below a millisecond still sleeps instead of spinning.
      ofi[0]->wait_alone(std::chrono::ceil<std::chrono::milliseconds>(timeout));
      return;
    }
    if (!words.empty()) {
      futex_wait_any(words.data(), words.size(), slice);
      return;
    }
    timespec ts{0, static_cast<long>(slice.count())};
    ::nanosleep(&ts, nullptr);
  }
};

}  // namespace sluice::detail
