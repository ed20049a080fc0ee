// WaitSet::sleep: one system call for whatever a parked Worker waits on.
#include "flow/wait_set.h"

#include <poll.h>
#include <time.h>

#include <algorithm>

#include "transport/ofi/ofi.h"

namespace sluice::detail {

void WaitSet::sleep(std::chrono::nanoseconds timeout, std::chrono::milliseconds mixed_slice) {
  if (ofi.empty()) {
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

}  // namespace sluice::detail
