// The ofi completion side shared by sources and targets: the operation
// context every libfabric operation carries (Op), the reader that hands an
// endpoint's completions to its core (CompletionReader), and the abort
// messages an endpoint that ends early sends its peers.
//
// Thread safety: everything here belongs to the one thread that owns the
// endpoint.
#pragma once

#include <rdma/fi_errno.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/test_hooks.h"
#include "flow/flow_core.h"
#include "transport/ofi/ofi.h"
#include "wire/layout.h"

namespace sluice::detail {

// Completions read per fi_cq_read.
inline constexpr size_t kCqBatch = 16;
// How long an endpoint that ends without the guarantee drives its endpoint
// so that its abort message leaves before the endpoint is abandoned.
inline constexpr auto kAbortFlush = std::chrono::milliseconds(100);

// A libfabric operation in flight. The provider owns `ctx` until the
// operation completes; the completion hands back its address.
enum class OpKind : uint8_t {
  kSegmentSend,
  kCreditRecv,
  kSegmentRecv,
  kCreditSend,
  kAbortRecv,  // also receives the target's END confirmation (kEndConfirmed)
  kAbortSend,
  kConfirmSend,
};
struct Op {
  fi_context2 ctx;  // first: op_context points here
  OpKind kind = OpKind::kSegmentSend;
  uint32_t ring = 0;
  uint32_t slot = 0;
  uint32_t count = 1;  // segment transfers: consecutive slots moved by this one operation
  bool busy = false;
};
static_assert(offsetof(Op, ctx) == 0);

// Reads one endpoint's completion queue for its core: every completion goes
// to the core's `handle(entry)` (which returns false to stop reading), and a
// failed operation to `on_error(text, its context)`, whose status ends the
// read. Test builds can make completions arrive out of order, as on an
// unordered provider (EFA's SRD): every batch is then handled in reverse, and
// one completion is held back until the next batch or until the core parks.
class CompletionReader {
 public:
  void enable_reordering(bool on) { unordered_ = on; }

  // Reads until the queue has no more completions.
  template <class Handle, class OnError>
  Status drain(ofi::Endpoint& ep, Handle&& handle, OnError&& on_error) {
    Completion c[kCqBatch + 1];
    for (;;) {
      std::string err;
      void* failed = nullptr;
      fi_cq_data_entry e[kCqBatch];
      fi_addr_t from[kCqBatch];
      const ssize_t n = ep.poll_from(e, from, kCqBatch, &err, &failed);
      if (Status s = dispatch(c, e, from, n, err, failed, handle, on_error); s != Status::kOk)
        return s;
      if (n < static_cast<ssize_t>(kCqBatch)) return Status::kOk;
    }
  }

  // Hands over a held-back completion if there is one (a completion must not
  // sleep with its core); otherwise blocks up to `timeout` for completions.
  template <class Handle, class OnError>
  Status wait(ofi::Endpoint& ep, std::chrono::milliseconds timeout, Handle&& handle,
              OnError&& on_error) {
    if (held_) {
      held_ = false;
      handle(held_entry_);
      return Status::kOk;
    }
    Completion c[kCqBatch + 1];
    fi_cq_data_entry e[kCqBatch];
    fi_addr_t from[kCqBatch];
    std::string err;
    void* failed = nullptr;
    const ssize_t n = ep.wait_from(e, from, kCqBatch, timeout, &err, &failed);
    return dispatch(c, e, from, n, err, failed, handle, on_error);
  }

 private:
  template <class Handle, class OnError>
  Status dispatch(Completion* c, const fi_cq_data_entry* e, const fi_addr_t* from, ssize_t n,
                  const std::string& err, void* failed, Handle& handle, OnError& on_error) {
    if (n < 0) return on_error(err, failed);
    for (ssize_t i = 0; i < n; ++i) c[i] = Completion{e[i], from[i]};
    const size_t m = reorder(c, static_cast<size_t>(n));
    for (size_t i = 0; i < m; ++i) {
      if (!handle(c[i])) break;
    }
    return Status::kOk;
  }

  size_t reorder(Completion* c, size_t n) {
    if (!unordered_) return n;
    std::reverse(c, c + n);
    if (held_) {
      c[n++] = held_entry_;
      held_ = false;
    }
    if (n > 1) {
      held_entry_ = c[0];
      held_ = true;
      std::memmove(static_cast<void*>(c), c + 1, (n - 1) * sizeof(*c));
      --n;
    }
    return n;
  }

  bool unordered_ = false;
  bool held_ = false;
  Completion held_entry_{};
};

// True if message completion `c` came from `peer`, or if the provider cannot
// say who sent it (then the tag is all there is).
inline bool sent_by_peer(const ofi::Endpoint& ep, const Completion& c, fi_addr_t peer) {
  return !ep.knows_sources() || c.from == peer;
}

// Posts the receive of peer `index`'s abort message into control[index].
// Without it the peer's end is learnt only from its rank's liveness.
void post_control_receive(ofi::Endpoint& ep, uint64_t* control, void* desc, uint32_t index, Op* op);

// An abort message's word: the sender's index in the low half, its abort
// word (layout::abort_word of `cause_rank`) in the high half; kEndConfirmed
// (bit 63) is never set in it. abort_word_of() reads the high half back.
inline uint64_t abort_message(uint32_t index, uint32_t cause_rank) {
  return uint64_t{layout::abort_word(cause_rank)} << 32 | index;
}
inline uint32_t abort_word_of(uint64_t message) {
  return std::max<uint32_t>(1, static_cast<uint32_t>(message >> 32) & 0x7fffffffu);
}

// Posts this endpoint's abort message to `peer`, counted in `op` until its
// completion (kAbortSend completions count it down). The first post writes
// the message (abort_message) into control[n] and sets up `op`; later posts
// send the same word, so that one in flight never changes under the
// provider. False if the provider refused it for now.
inline bool post_abort_message(ofi::Endpoint& ep, uint64_t* control, uint32_t n, void* desc,
                               uint32_t index, uint32_t cause_rank, fi_addr_t peer, Op* op) {
  if (op->kind != OpKind::kAbortSend) {
    control[n] = abort_message(index, cause_rank);
    *op = Op{{}, OpKind::kAbortSend, 0, 0, 0, false};
  }
  if (ep.tsend(&control[n], sizeof(uint64_t), desc, peer, kTagAbort | index, &op->ctx) != 0)
    return false;
  ++op->count;
  return true;
}

// An endpoint no core ever took (its end was never opened) tells each of
// `peers` that it ends (abort messages from endpoint `index`, with the
// control words at `control`, n of them before the abort word), and drives
// the endpoint for at most kAbortFlush so that they leave.
void send_aborts_unopened(ofi::Endpoint& ep, uint64_t* control, void* desc, uint32_t n,
                          uint32_t index, uint32_t cause_rank, const std::vector<fi_addr_t>& peers);

// Drives the endpoint (`drive` reads its completion queue) for at most
// kAbortFlush, until the abort messages counted in `op` completed, so that
// they leave before the endpoint is abandoned. Teardown only: not from
// inside a completion handler.
template <class Drive>
void flush_abort_messages(Op* op, Drive&& drive) {
  if (op->kind != OpKind::kAbortSend) return;
  if (op->count > 0) test_hooks::note_blocking_wait("sending abort messages");
  for (const auto until = Clock::now() + kAbortFlush; op->count > 0 && Clock::now() < until;) {
    if (drive() != Status::kOk) break;
    if (op->count > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace sluice::detail
