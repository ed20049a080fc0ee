// Lines that describe endpoints from their counters, for reports: `sluice
// run`'s (job timeout, SIGUSR1) and a rank's own on SIGUSR1.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "observe/endpoint_counters.h"

namespace sluice::detail::counters {

// "flow 'ticks' target (2,0) open: 1234 records in 56 segments, 3 parks",
// "region 'accounts' region (1,4) open: 10 operations, 80 bytes, owner rank
// 0" and the like, one line.
std::string describe(const Reading& e);

// For a target that has not ended: which sources it still waits for, with
// the rank (and `host_of(rank)`, if not empty) of each and how long before
// `now_ns` (CLOCK_REALTIME) it last took a segment of theirs, and which
// have ended: "waiting for source (1,0) on rank 1 (hostB): last segment
// taken 5.2 s ago; (0,0),(2,0) ended". For a source waiting for credit now:
// the target whose ring is full and for how long ("waiting 3.0 s for credit
// from target (2,0) on rank 2 (hostC): its ring of 16 segments is full").
// Empty otherwise (a source that is not waiting, a target that ended).
std::string waiting_for(const Reading& e, uint64_t now_ns,
                        const std::function<std::string(uint32_t rank)>& host_of);

// A flow endpoint (not a region handle, which never ends) that has not
// ended: what a hang report counts and marks.
bool open_flow_endpoint(const Reading& e);

// The lines of a report on `endpoints`: "  " + describe() per endpoint
// (with "  <- not ended" appended to the open flow endpoints if
// `mark_open`), and under a target still waiting or a source waiting for
// credit, "    " + waiting_for().
// `sluice run`'s report and a rank's own (SIGUSR1) print these.
std::vector<std::string> report_lines(const std::vector<Reading>& endpoints, uint64_t now_ns,
                                      const std::function<std::string(uint32_t rank)>& host_of,
                                      bool mark_open);

}  // namespace sluice::detail::counters
