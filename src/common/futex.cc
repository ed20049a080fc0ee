#include "common/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace sluice::detail {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "futex words must be plain 32-bit words");

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Relative timeout; EINTR, EAGAIN and ETIMEDOUT all just return to the
  // caller's loop, which re-checks its condition.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wait_any(const FutexWaiter* waiters, size_t count, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0 || count == 0) return;
  if (count == 1) return futex_wait(waiters[0].word, waiters[0].expected, timeout);
#ifdef SYS_futex_waitv
  constexpr size_t kMostWaiters = 128;  // FUTEX_WAITV_MAX
  static std::atomic<bool> unsupported{false};
  if (count <= kMostWaiters && !unsupported.load(std::memory_order_relaxed)) {
    struct futex_waitv v[kMostWaiters] = {};
    for (size_t i = 0; i < count; ++i) {
      v[i].val = waiters[i].expected;
      v[i].uaddr = reinterpret_cast<uintptr_t>(waiters[i].word);
      v[i].flags = FUTEX_32;  // shared between processes: never FUTEX_PRIVATE_FLAG
    }
    // futex_waitv takes an absolute CLOCK_MONOTONIC timeout.
    timespec now;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t until =
        static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec + timeout.count();
    timespec ts;
    ts.tv_sec = static_cast<time_t>(until / 1000000000);
    ts.tv_nsec = static_cast<long>(until % 1000000000);
    if (::syscall(SYS_futex_waitv, v, static_cast<unsigned>(count), 0, &ts, CLOCK_MONOTONIC) >= 0 ||
        errno != ENOSYS) {
      return;
    }
    unsupported.store(true, std::memory_order_relaxed);
  }
#endif
  futex_wait(waiters[0].word, waiters[0].expected,
             std::min<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(1)));
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace sluice::detail
