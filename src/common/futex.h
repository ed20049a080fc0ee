// Futex wait/wake on 32-bit words that may live in memory shared between
// processes (so never FUTEX_PRIVATE_FLAG), and the CPU pause for spin loops.
//
// Thread safety: these are the synchronisation primitives; any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Sleeps while *word == expected, at most `timeout`. Returns early on a wake,
// a signal, or if the word already differs. Never throws.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every waiter on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace sluice::detail
