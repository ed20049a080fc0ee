// Reading the counters areas sluice processes publish
// (src/flow/endpoint_counters.h): what `sluice top` shows, and what `sluice
// run` reports about its ranks when a job times out or on SIGUSR1.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <cstdint>
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

}  // namespace sluice::tool
