// WaitSet::sleep: one system call for whatever a parked Worker waits on;
// DrivenSources: the ofi sources a Worker drives in the background.
#include "flow/wait_set.h"

#include <poll.h>
#include <time.h>

#include <algorithm>

#include "common/check.h"
#include "transport/ofi/ofi.h"

namespace sluice::detail {

void WaitSet::sleep(std::chrono::nanoseconds timeout, std::chrono::milliseconds mixed_slice) {
  if (ofi.empty()) {
    if (words.empty()) {
      // Nothing to wait on (a worker with no open input, watching views):
      // sleep the slice rather than return at once and spin.
      if (timeout.count() <= 0) return;
      timespec ts{static_cast<time_t>(timeout.count() / 1000000000),
                  static_cast<long>(timeout.count() % 1000000000)};
      ::nanosleep(&ts, nullptr);
      return;
    }
    futex_wait_any(words.data(), words.size(), timeout);
    return;
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout);
  if (words.empty() && ofi.size() == 1) {
    ofi[0].core->wait_alone(ms);
    return;
  }
  if (words.empty() &&
      std::all_of(ofi.begin(), ofi.end(), [](const Ofi& o) { return o.ep->wait_fd() >= 0; })) {
    fds.clear();
    for (const Ofi& o : ofi) {
      // Completions already queued (or progress owed) would not make the
      // fd readable: read them first.
      if (!o.ep->ready_to_block()) return;
      fds.push_back({o.ep->wait_fd(), POLLIN, 0});
    }
    (void)::poll(fds.data(), fds.size(), static_cast<int>(ms.count()));
    return;
  }
  const auto slice = std::min<std::chrono::nanoseconds>(timeout, mixed_slice);
  if (!words.empty()) {
    futex_wait_any(words.data(), words.size(), slice);
    return;
  }
  timespec ts{0, static_cast<long>(slice.count())};
  ::nanosleep(&ts, nullptr);
}

SourceCore::~SourceCore() {
  if (driver_ != nullptr) driver_->remove(this);
}

DrivenSources::~DrivenSources() {
  for (SourceCore* s : sources) s->driver_ = nullptr;
}

void DrivenSources::add(SourceCore* s) {
  if (s->driver_ == this || !s->drivable_) return;
  if (s->driver_ != nullptr) s->driver_->remove(s);
  sources.push_back(s);
  s->driver_ = this;
}

void DrivenSources::remove(SourceCore* s) {
  SLUICE_CHECK(s->driver_ == this);
  auto it = std::find(sources.begin(), sources.end(), s);
  SLUICE_CHECK(it != sources.end());
  *it = sources.back();
  sources.pop_back();
  s->driver_ = nullptr;
}

void DrivenSources::drive() {
  for (size_t i = 0; i < sources.size();) {
    SourceCore* s = sources[i];
    if (s->drive()) {
      ++i;
    } else {
      remove(s);  // moves the last one here: look at index i again
    }
  }
}

bool DrivenSources::delivering() const {
  return std::any_of(sources.begin(), sources.end(),
                     [](const SourceCore* s) { return s->delivering(); });
}

}  // namespace sluice::detail
