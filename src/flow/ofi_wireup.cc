// Wire-up of a flow's ofi connections at declare time (see kTagHello).
//
// Why: libfabric's tcp;ofi_rxm connects lazily, and a first write to a peer
// returns -FI_EAGAIN until the peer's endpoint is driven. A single-threaded
// rank that pushes and then consumes drives its target endpoint only once
// its push returns, so two such ranks pushing to each other would wait on
// each other forever. declare() is the one moment every participant is
// known to be in the library driving its endpoints: every connection is made
// then, in both directions (a greeting and its answer), and the data plane
// later finds them open.
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "flow/flow_core.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {
namespace {

// One greeting (or answer) in flight, or a receive waiting for one.
struct HelloOp {
  fi_context2 ctx{};
  bool send = false;
  bool posted = false;
  bool done = false;
  uint32_t side = 0;  // index into the sides below
  uint32_t peer = 0;  // index into that side's peers
};

struct SideState {
  const OfiWiring::Side* side = nullptr;
  bool source = false;
  std::vector<HelloOp> recvs;  // one per peer
  std::vector<HelloOp> sends;  // one per peer
};

std::string name_of(const FlowContext& ctx, bool source, uint32_t index) {
  return ctx.peer_name(source, index);
}

bool is_hello(const SideState& st, const void* context) {
  auto within = [context](const std::vector<HelloOp>& ops) {
    return !ops.empty() && context >= static_cast<const void*>(ops.data()) &&
           context < static_cast<const void*>(ops.data() + ops.size());
  };
  return within(st.recvs) || within(st.sends);
}

}  // namespace

void wire_up(const FlowContext& ctx, const OfiWiring& wiring, Deadline deadline) {
  std::vector<SideState> sides;
  for (const auto& s : wiring.sources) sides.push_back({&s, true, {}, {}});
  for (const auto& t : wiring.targets) sides.push_back({&t, false, {}, {}});
  if (sides.empty()) return;

  // Sources wait for answers; targets for greetings. Both receive into their
  // per-peer control words and send from the word after them.
  for (uint32_t i = 0; i < sides.size(); ++i) {
    SideState& st = sides[i];
    const auto& peers = st.side->peers;
    st.recvs.resize(peers.size());
    st.sends.resize(peers.size());
    for (uint32_t p = 0; p < peers.size(); ++p) {
      st.recvs[p] = HelloOp{{}, false, false, false, i, p};
      st.sends[p] = HelloOp{{}, true, false, false, i, p};
    }
  }
  auto post_recv = [&](SideState& st, uint32_t p) {
    HelloOp& op = st.recvs[p];
    const uint32_t peer_index = st.side->peers[p].first;
    const ssize_t rc = st.side->ep->trecv(&st.side->control[peer_index], sizeof(uint64_t),
                                          st.side->control_desc, kTagHello | peer_index, &op.ctx);
    if (rc == 0) op.posted = true;
    return rc;
  };
  // The word sent is the sender's own index; it sits after the receive words.
  auto send_word = [&](SideState& st) -> uint64_t* {
    const size_t n = st.source ? ctx.spec.targets().size() : ctx.spec.sources().size();
    st.side->control[n] = st.side->index;
    return &st.side->control[n];
  };
  auto post_send = [&](SideState& st, uint32_t p) {
    HelloOp& op = st.sends[p];
    const ssize_t rc =
        st.side->ep->tsend(send_word(st), sizeof(uint64_t), st.side->control_desc,
                           st.side->peers[p].second, kTagHello | st.side->index, &op.ctx);
    if (rc == 0) op.posted = true;
    return rc;
  };
  auto fail_post = [&](SideState& st, ssize_t rc, const char* what) {
    throw Error(ErrorCode::kResource,
                "flow '" + ctx.spec.name() + "' " + name_of(ctx, st.source, st.side->index) +
                    ": cannot " + what +
                    " while connecting: " + ofi::lib::strerror(static_cast<int>(-rc)));
  };

  // Every rank of the flow: a peer this side still waits to hear from may be
  // alive but never greet, because it gave up the flow when a third rank of
  // it was lost (its own wire-up needed that one). So while a greeting is
  // missing, any lost participant fails the declaration, as the registry
  // fails it for one lost before. Once every peer has greeted, only a lost
  // peer does: a replicate target whose source has greeted it goes on when
  // another target dies (its source goes on without that one too).
  std::vector<uint32_t> participants;
  for (const auto* eps : {&ctx.spec.sources(), &ctx.spec.targets()})
    for (const Endpoint& e : *eps) participants.push_back(e.rank);
  std::sort(participants.begin(), participants.end());
  participants.erase(std::unique(participants.begin(), participants.end()), participants.end());

  const uint32_t spin = 1000;
  for (uint32_t round = 0;; ++round) {
    bool all_done = true;
    for (SideState& st : sides) {
      for (uint32_t p = 0; p < st.recvs.size(); ++p) {
        if (!st.recvs[p].posted) {
          if (ssize_t rc = post_recv(st, p); rc != 0 && rc != -FI_EAGAIN)
            fail_post(st, rc, "post a receive");
        }
        // A source greets at once; a target answers once greeted.
        const bool may_send = st.source || st.recvs[p].done;
        if (may_send && !st.sends[p].posted) {
          if (ssize_t rc = post_send(st, p); rc != 0 && rc != -FI_EAGAIN)
            fail_post(st, rc, "send a greeting");
        }
        all_done &= st.recvs[p].done && st.sends[p].done;
      }
      // Drive the endpoint: this is what lets peers' connections complete.
      fi_cq_data_entry e[16];
      fi_addr_t from[16];
      for (;;) {
        std::string err;
        void* failed = nullptr;
        const ssize_t n = st.side->ep->poll_from(e, from, 16, &err, &failed);
        if (n < 0) {
          auto* op = static_cast<HelloOp*>(failed);
          const std::string who =
              op != nullptr ? " with " + name_of(ctx, !st.source, st.side->peers[op->peer].first)
                            : std::string();
          throw Error(ErrorCode::kResource, "flow '" + ctx.spec.name() + "' " +
                                                name_of(ctx, st.source, st.side->index) +
                                                ": connecting" + who + " failed: " + err);
        }
        for (ssize_t i = 0; i < n; ++i) {
          if (is_hello(st, e[i].op_context)) {
            static_cast<HelloOp*>(e[i].op_context)->done = true;
          } else if (st.side->backlog != nullptr) {
            // A source that finished its wire-up may already write to this
            // target: keep the completion for the target's core.
            st.side->backlog->push_back(Completion{e[i], from[i]});
          }
        }
        if (n < 16) break;
      }
    }
    if (all_done) break;
    if (round < spin) continue;
    // Bounded, and a lost peer ends the wait at once.
    bool greeting_missing = false;
    for (const SideState& st : sides)
      for (const HelloOp& op : st.recvs) greeting_missing |= !op.done;
    // A peer that gave the flow up for a newer view never answers: give it
    // up too, at once, rather than at the set-up deadline.
    if (wiring.superseded) {
      if (std::string why = wiring.superseded(); !why.empty())
        throw Error(ErrorCode::kViewChanged, why);
    }
    if (ctx.liveness != nullptr && greeting_missing) {
      for (uint32_t rank : participants) {
        if (ctx.liveness->alive(rank)) continue;
        const SideState& st = sides.front();
        throw PeerLostError(rank, "flow '" + ctx.spec.name() +
                                      "': " + ctx.liveness->describe(rank) + " while connecting " +
                                      name_of(ctx, st.source, st.side->index) +
                                      " (a participant of the flow)");
      }
    }
    for (const SideState& st : sides) {
      for (uint32_t p = 0; p < st.recvs.size(); ++p) {
        if (st.recvs[p].done && st.sends[p].done) continue;
        const uint32_t peer_index = st.side->peers[p].first;
        const uint32_t rank =
            st.source ? ctx.spec.targets()[peer_index].rank : ctx.spec.sources()[peer_index].rank;
        if (ctx.liveness != nullptr && !ctx.liveness->alive(rank)) {
          throw PeerLostError(
              rank, "flow '" + ctx.spec.name() + "': " + ctx.liveness->describe(rank) +
                        " while connecting " + name_of(ctx, st.source, st.side->index) + " to " +
                        name_of(ctx, !st.source, peer_index));
        }
        if (Clock::now() >= deadline) {
          throw Error(ErrorCode::kTimeout,
                      "flow '" + ctx.spec.name() + "' " + name_of(ctx, st.source, st.side->index) +
                          ": " + name_of(ctx, !st.source, peer_index) + " on rank " +
                          std::to_string(rank) + " did not answer over ofi before the setup " +
                          "deadline (is its rank in declare()? is the network between them up?)");
        }
      }
    }
    if (round < spin + 64) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace sluice::detail
