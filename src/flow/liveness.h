// What a flow needs to know about its peers' liveness, and nothing else: the
// flow layer asks it on its slow paths (a wait that timed out a slice, a
// wire-up that has not heard back) and never includes the control plane.
// src/control's PeerTable implements it from the registry's membership
// events; src/cluster.cc hands the registry client's table to every flow
// (FlowContext::liveness), and tests may pass their own.
//
// Thread safety: every method may be called from any thread at any time
// (the cores' threads poll it while the control thread updates it).
// Ownership: the flow borrows it; it must outlive every flow given it.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::detail {

class Liveness {
 public:
  virtual ~Liveness() = default;
  // False once `rank` has left the job or died (and forever after).
  // REQUIRES: rank < the job's world size.
  virtual bool alive(uint32_t rank) const = 0;
  // True when `rank` is lost because it left the job (closed its connection
  // to the registry), not because it died. A rank that leaves with a flow
  // still open mostly does so because it saw another rank's death first: a
  // target that finds both gone names the death. Default: never.
  virtual bool left(uint32_t /*rank*/) const { return false; }
  // True once the connection to the job's registry itself is gone: no rank's
  // liveness can be known any more.
  virtual bool registry_lost() const = 0;
  // A sentence about `rank` for messages, e.g.
  // "rank 3 (host1, pid 1234) died: connection closed".
  virtual std::string describe(uint32_t rank) const = 0;
  // Another process named `rank` as the cause of its abort (the rank its
  // end had lost): this process's own aborts may name it too, for a while,
  // in the flows it is part of (first_lost_rank), although its own liveness
  // may not have heard of that loss yet. Aborts cascade across flows faster
  // than the registry reports a death: without it, an end aborted because
  // of rank 1's loss named no cause, and its peers blamed the aborting rank.
  // A hint for naming causes only: alive() is unchanged. Default: ignored.
  virtual void hear_lost(uint32_t /*rank*/) const {}
  virtual bool heard_lost(uint32_t /*rank*/) const { return false; }
  // True once the job declared `rank` dead (the process this flow was set
  // up with: a later incarnation does not make it alive again). Such a
  // process may still run, on another host, stopped and resumed or cut off
  // and back: a target refuses every segment of it whose arrival it takes
  // from then on (docs/architecture.md, "Fencing"). A rank that left is not
  // fenced: what it sent before it left is delivered. One acquire load:
  // the data plane asks it per arrival. Default: never.
  virtual bool fenced(uint32_t /*rank*/) const { return false; }
};

}  // namespace sluice::detail
