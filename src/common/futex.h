// Futex wait/wake on 32-bit words that may live in memory shared between
// processes (so never FUTEX_PRIVATE_FLAG), and the CPU pause for spin loops.
//
// Thread safety: these are the synchronisation primitives; any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "sluice/detail/cpu.h"  // cpu_relax

namespace sluice::detail {

// Sleeps while *word == expected, at most `timeout`. Returns early on a wake,
// a signal, or if the word already differs. Never throws.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
// One word of futex_wait_any: sleep while *word == expected.
struct FutexWaiter {
  std::atomic<uint32_t>* word = nullptr;
  uint32_t expected = 0;
};
// Sleeps while every waiters[i].word still holds its expected value, at most
// `timeout`: one system call for several words (futex_waitv, Linux 5.16).
// Where the kernel lacks it, or for more than 128 words, it sleeps on the
// first word for at most 1 ms, so callers polling the rest stay responsive.
// Returns early on a wake, a signal, or a word that already differs.
void futex_wait_any(const FutexWaiter* waiters, size_t count, std::chrono::nanoseconds timeout);
// Wakes every waiter on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace sluice::detail
