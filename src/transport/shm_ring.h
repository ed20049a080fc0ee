// The shm ring transport: the few stores and loads by which a source and a
// target share a ring in one memfd mapping (src/wire/layout.h draws it).
// The source writes records straight into the target's segment and
// publishes it with a release store of the footer's seq; the target returns
// credit with a release store of `consumed`; each side wakes the other only
// if it announced that it parks. Everything is inline: this is the data
// path of every shm flow, and it adds no call to it.
//
// Thread safety: each function is called by the one thread that owns its
// side of the ring (the source's or the target's); the words they share
// are synchronised as commented.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/futex.h"
#include "wire/layout.h"

namespace sluice::detail::shm_ring {

// Wakes whoever sleeps on `futex_word`: bumps it (so that a waiter about to
// sleep on its old value does not), then wakes every sleeper.
inline void wake(std::atomic<uint32_t>* futex_word) {
  futex_word->fetch_add(1, std::memory_order_relaxed);
  futex_wake_all(futex_word);
}

// Wakes the other side if it announced that it parks. The fence orders our
// preceding publication before the load of `waiting`; the waiter has the
// mirror fence between its store of `waiting` and its re-check, so at least
// one side sees the other (Dekker), and no wake-up is lost.
inline void wake_if_waiting(std::atomic<uint32_t>* waiting, std::atomic<uint32_t>* futex_word) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiting->load(std::memory_order_relaxed) != 0) [[unlikely]]
    wake(futex_word);
}

// The waiter's half of wake_if_waiting(): announces in `waiting` that this
// side parks, then calls `ready()` once more (what the other side
// published before the announcement would otherwise be missed) and, unless
// it returns true, sleeps on `word` for at most `timeout` or until the
// other side bumps it.
template <class Ready>
void park(std::atomic<uint32_t>* waiting, std::atomic<uint32_t>* word,
          std::chrono::nanoseconds timeout, Ready&& ready) {
  waiting->store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t seen = word->load(std::memory_order_relaxed);
  if (!ready()) futex_wait(word, seen, timeout);
  waiting->store(0, std::memory_order_relaxed);
}

// Source: publishes the ring's segment whose footer is `f` as segment
// seq - 1, once its payload, bytes_used and flags are written. Release: they
// become visible no later than seq; pairs with the target's acquire load in
// arrived().
inline void publish(layout::Footer* f, uint64_t seq, layout::Doorbell* bell) {
  f->seq.store(seq, std::memory_order_release);
  wake_if_waiting(&bell->waiting, &bell->seq);
}

// Source: how many segments the target has finished with. Acquire: pairs
// with the release store in return_credit(), so the target's reads of the
// segments it released happen before we overwrite them.
inline uint64_t consumed(const layout::RingView& ring) {
  return ring.header->consumed.load(std::memory_order_acquire);
}

// Target: true if segment k of the ring is published. Acquire: pairs with
// the source's release store in publish(); the payload, bytes_used and
// flags are complete once we see k + 1.
inline bool arrived(const layout::RingView& ring, uint64_t k) {
  return ring.footer(k)->seq.load(std::memory_order_acquire) == k + 1;
}

// Target: hands back every segment up to `released`. Release: our reads of
// the released segments happen before the source, after its acquire load
// in consumed(), overwrites them.
inline void return_credit(const layout::RingView& ring, uint64_t released) {
  ring.header->consumed.store(released, std::memory_order_release);
  wake_if_waiting(&ring.header->source_waiting, &ring.header->credit_seq);
}

// Source: tells the target that this source ends without its END, and wakes
// it. Release: pairs with the acquire load in source_aborted(), so that a
// segment published before is seen too.
inline void abort_source(const layout::RingView& ring, layout::Doorbell* bell,
                         uint32_t cause_rank) {
  ring.header->source_aborted.store(layout::abort_word(cause_rank), std::memory_order_release);
  bell->seq.fetch_add(1, std::memory_order_relaxed);
  futex_wake_all(&bell->seq);
}
// The source's abort word (layout::abort_word), 0 while it has not aborted.
inline uint32_t source_aborted(const layout::RingView& ring) {
  return ring.header->source_aborted.load(std::memory_order_acquire);
}

// Target: tells the source that this target is gone before the source's
// END, and wakes it. Release: pairs with the acquire load in
// target_aborted().
inline void abort_target(const layout::RingView& ring, uint32_t cause_rank) {
  ring.header->target_aborted.store(layout::abort_word(cause_rank), std::memory_order_release);
  ring.header->credit_seq.fetch_add(1, std::memory_order_relaxed);
  futex_wake_all(&ring.header->credit_seq);
}
// The target's abort word (layout::abort_word), 0 while it has not aborted.
inline uint32_t target_aborted(const layout::RingView& ring) {
  return ring.header->target_aborted.load(std::memory_order_acquire);
}

}  // namespace sluice::detail::shm_ring
