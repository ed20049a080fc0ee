// Reading the counters areas sluice processes publish
// (src/observe/endpoint_counters.h): what `sluice top` shows, and what `sluice
// run` reports about its ranks when a job times out or on SIGUSR1.
//
// Thread safety: the functions may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "observe/counters_report.h"
#include "observe/endpoint_counters.h"

namespace sluice::tool {

// One flow endpoint (or region handle) as its process last published it.
using Endpoint = detail::counters::Reading;
using detail::counters::describe;
using detail::counters::waiting_for;

// One process with a counters area.
struct Process {
  int pid = 0;
  int64_t rank = -1;   // its Cluster's rank, -1 before join, kSpareRank for a spare waiting
  uint64_t epoch = 0;  // the membership view's epoch it is in
  std::string job;     // its job's registry address
  std::vector<Endpoint> endpoints;
};

// Every process on this host with a counters area this user may read (only
// `pid` when non-zero), sorted by job, rank and pid. Endpoints destroyed, or
// being reassigned while read, are left out.
std::vector<Process> read_counters(int pid = 0);

}  // namespace sluice::tool
