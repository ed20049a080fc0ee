// A read-only look at a running job through its registry: who its ranks
// are (the registry's view: state, host, pid) and what they published
// under given keys. `sluice info --registry` uses it to tell which path
// (shm or ofi) a rank started here would take to each member.
//
// It speaks the registry protocol as an observer: a HELLO with rank kNoRank
// and world size 0, then GETs, then LEAVE (docs/protocol.md). An observer
// is never one of the job's ranks, and may send nothing but GET, HEARTBEAT
// and LEAVE.
//
// Thread safety: a plain function; no state is kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/deadline.h"
#include "sluice/errors.h"

namespace sluice::control {

struct ObservedRank {
  uint32_t rank = 0;
  std::string state;   // "alive", "left", "died" or "vacant" (an elastic job's free number)
  std::string reason;  // why it left or died
  std::string host;    // its host name, as it said at HELLO
  uint32_t pid = 0;
  std::string value;  // what it put under the key asked for ("" if none came in time)
};

// Connects to the registry at host:port with `secret` (the job's), and
// returns every rank it has seen, each with its value of
// key_prefix + "<rank>" (waiting at most `get_timeout_ms` for each).
// Throws Error naming what failed: unreachable, refused (wrong secret),
// or an answer it cannot read.
std::vector<ObservedRank> observe_job(const std::string& host, uint16_t port,
                                      const std::string& secret, const std::string& key_prefix,
                                      uint32_t get_timeout_ms, Deadline deadline);

}  // namespace sluice::control
