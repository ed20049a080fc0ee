// apps/kv/flow_epochs.h: what names an epoch of sluice-kv's flows
// (flow_job.cc) and what it tells the protocols: the suffix of its flows'
// names, its NOPaxos session, the ranks it lost and the replicas present.
//
// Thread safety: pure functions.
#pragma once

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

}  // namespace kv
