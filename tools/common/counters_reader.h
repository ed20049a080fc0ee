// Reading the counters areas sluice processes publish
// (src/flow/endpoint_counters.h): what `sluice top` shows, and what `sluice
// run` reports about its ranks when a job times out or on SIGUSR1.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flow/endpoint_counters.h"

namespace sluice::tool {

// One flow endpoint as its process last published it.
struct Endpoint {
  std::string flow;
  detail::counters::Role role{};
  uint32_t rank = 0, slot = 0, peers = 0, record_size = 0;
  detail::counters::State state{};
  std::string cause;
  uint64_t opened_ns = 0, segments = 0, bytes = 0, credit_waits = 0, credit_wait_ns = 0, parks = 0;
  // Its first peers (detail::counters::kPeerDetail at most) one by one.
  std::vector<detail::counters::PeerReading> peer_detail;
};

// One process with a counters area.
struct Process {
  int pid = 0;
  int64_t rank = -1;  // its Cluster's rank, -1 before join
  std::string job;    // its job's registry address
  std::vector<Endpoint> endpoints;
};

// Every process on this host with a counters area this user may read (only
// `pid` when non-zero), sorted by job, rank and pid. Endpoints destroyed, or
// being reassigned while read, are left out.
std::vector<Process> read_counters(int pid = 0);

// "flow 'ticks' target (2,0) open: 1234 records in 56 segments, 3 parks" and
// the like, one line, for reports.
std::string describe(const Endpoint& e);

// For a target that has not ended: which sources it still waits for, with
// the rank (and `host_of(rank)`, if not empty) of each and how long before
// `now_ns` (CLOCK_REALTIME) it last took a segment of theirs, and which
// have ended: "waiting for source (1,0) on rank 1 (hostB): last segment
// taken 5.2 s ago; (0,0),(2,0) ended". Empty for a source, or a target that
// ended.
std::string waiting_for(const Endpoint& e, uint64_t now_ns,
                        const std::function<std::string(uint32_t rank)>& host_of);

}  // namespace sluice::tool
