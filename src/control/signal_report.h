// SIGUSR1 to a rank prints what its flow endpoints and region handles are
// doing (the lines `sluice run` prints for a job that timed out), without
// stopping it: the first thing to do with a job that seems stuck is to ask
// each rank where it waits.
//
// The handler only counts the signal (one lock-free atomic add, which is
// async-signal-safe); each registry client's control thread, which wakes at
// least once per heartbeat interval (and at once if the signal interrupted
// it), sees the count change and prints its rank's report to stderr.
//
// The handler is installed when the first Cluster joins, and only if
// SIGUSR1 is still at its default disposition (which would kill the
// process): a program that handles SIGUSR1 itself keeps it. SLUICE_SIGUSR1=0
// leaves SIGUSR1 alone.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sluice::control::signal_report {

// Installs the handler once per process (see above).
void install();
// How many SIGUSR1s the handler has counted.
uint64_t requests();
// The report's text: a line per endpoint of `rank` in this process, with
// what each target still waits for; `host_of` names a rank's host.
std::string report(uint32_t rank, const char* when,
                   const std::function<std::string(uint32_t)>& host_of);

}  // namespace sluice::control::signal_report
