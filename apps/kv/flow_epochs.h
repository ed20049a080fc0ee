// apps/kv/flow_epochs.h: an epoch of sluice-kv's flows (flow_job.cc): its
// flows and this rank's ends of them (Epoch), what names it and what it
// tells the protocols: the suffix of its flows' names, its NOPaxos
// session, the ranks it lost and the replicas present.
//
// Thread safety: the functions are pure; an Epoch belongs to its rank's one
// thread.
#pragma once

#include <sluice/flow.h>
#include <sluice/worker.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kv {

// The suffix of an epoch's flow names: "" while every rank is alive, else
// "-without-" and the lost ranks, e.g. "-without-0-2". Every rank that sees
// the same live ranks (increasing) declares the same names.
std::string epoch_suffix(uint32_t world, const std::vector<uint32_t>& live);
// An epoch's number, which is also its NOPaxos session: 1 plus, for every
// rank, two per restart (`inc`: its incarnation, or the one that died) and
// one if it is not in `live` (increasing). Every change of the job's ranks
// raises it, so sessions only grow and every epoch's flows have new names.
uint32_t epoch_session(const std::vector<uint32_t>& live, const std::vector<uint32_t>& inc);
// The ranks below `below` that are not in `live` (increasing).
std::vector<uint32_t> lost_ranks(uint32_t world, const std::vector<uint32_t>& live, uint32_t below);
// The replicas (ranks below `replicas`) in `live`, a bit each: what the
// epoch tells the protocols (Node::replicas_present).
uint32_t present_replicas(const std::vector<uint32_t>& live, uint32_t replicas);
// " 0 1 3": ranks for messages.
std::string ranks_text(const std::vector<uint32_t>& ranks);

// One epoch's flows and this rank's ends of them, among the ranks that were
// alive when it began. Members are destroyed in reverse order: the sources,
// the Worker with its targets, then the flows (collective among the live).
struct Epoch {
  std::vector<uint32_t> live;
  // Per rank: its incarnation while a member, the one that died if not.
  std::vector<uint32_t> inc;
  uint32_t session = 1;         // NOPaxos: this epoch's ordered flow's session (epoch_session)
  uint32_t first_follower = 0;  // the follower whose copy of an Accept goes on kv-accept
  sluice::DeclaredFlow msg_flow, accept_flow, order_flow;
  sluice::Worker w;
  sluice::Source<sluice::Bytes> msg_src, accept_src, order_src;
  sluice::Worker::InputId order_input = 0;
  std::string broken;  // why the epoch ended early; empty while it runs

  // Rank r's index among kv-msg's targets, or -1 if it is not in the epoch.
  int target_of(uint32_t r) const {
    for (size_t i = 0; i < live.size(); ++i)
      if (live[i] == r) return static_cast<int>(i);
    return -1;
  }
  bool member(uint32_t r) const { return target_of(r) >= 0; }
  void reset() {
    msg_src = {};
    accept_src = {};
    order_src = {};
    w = sluice::Worker();
    order_flow = {};
    accept_flow = {};
    msg_flow = {};
    broken.clear();
  }
};

}  // namespace kv
