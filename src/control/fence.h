// Fencing a rank declared lost. A process the registry declared lost may
// still run (stopped and resumed, or too busy to heartbeat); on its own host
// it can still write into the shared memory of the survivors' flows and
// regions. Each survivor on that host kills it, and sees it exit, before it
// moves to the view without it (RegistryClient::apply_peer), so that no
// write of the lost process lands after a survivor acted on the new view.
//
// A process is named by its fence identity, which it sends in HELLO and the
// registry passes on in the peer events:
//
//   <host identity>|<pid namespace>|<start time in clock ticks since boot>
//
// The host identity is shm's (detail::host_identity(): host name, boot id,
// network namespace): exactly the processes that map each other's shared
// memory share it. The start time tells the process from a later one given
// the same pid.
//
// Thread safety: the functions are reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::control {

// This process's fence identity.
std::string fence_identity();

struct FenceOutcome {
  enum Kind {
    kElsewhere,  // not on this host (or not in this pid namespace): nothing to do here
    kGone,       // the process had already exited
    kExiting,    // already exiting when looked at (killed all the same), and seen to exit
    kKilled,     // killed with SIGKILL, and seen to exit
    kNoExit,     // killed, but not seen to exit within the wait (it runs no more user code)
    kFailed,     // could not be killed (text says why)
  };
  Kind kind = kElsewhere;
  std::string text;  // for kFailed and kNoExit
};

// Fences the process `identity` names, whose pid is `pid`: if it is on this
// host, kills it with SIGKILL and waits up to `wait` for it to exit.
// Throws only std::bad_alloc.
FenceOutcome fence(const std::string& identity, uint32_t pid, std::chrono::milliseconds wait);

}  // namespace sluice::control
