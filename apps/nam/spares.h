// apps/nam/spares.h: spare client slots, which a compute rank started again
// (`sluice run --restarts`) takes to run new clients in place of those its
// first process lost.
//
// A client's timestamps are pre-assigned (layout.h), and a dead client's
// slot is retired for good by recovery, so a replacement cannot run as the
// client it replaces. `--spare-clients S` adds S client slots to the
// layout (the last S client ids) that start *parked* (rsi.h,
// begin_read_only): memory server 0 sets their park words before any
// client begins, so while nobody runs them their pending timestamps hold
// no one back, exactly as a parked read-only client's do. A replacement
// claims a slot and takes the park over: its first begin() unparks it,
// which gives up every timestamp of the slot that others may have passed
// (the park protocol's own path, rsi.cc). Nothing else in the protocol
// changes.
//
// Which process runs a slot is settled by one claim word per slot in the
// results area on memory server 0, changed only by compare-and-swap:
//
//   free --claim (a replacement)--> running --finish (it)--> done
//   free --close (the reporter, at the run's end)--> closed
//
// The reporter closes every slot still free before it recovers the clients
// that never retired (a closed slot is retired, not recovered: it never
// ran), and waits for every running one until it is done or the process
// that claimed it is lost (then its clients are recovered as any dead
// client's). A replacement that comes after the close finds the run over.
//
// Thread safety: plain functions; each call uses the RemoteRegion it is
// given, which one thread at a time may use.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "layout.h"

namespace sluice::nam {

enum class SpareState : uint8_t { kFree = 0, kRunning = 1, kDone = 2, kClosed = 3 };

// A claim word: the state, and for running and done the process that
// claimed the slot (its rank and incarnation).
struct SpareClaim {
  SpareState state = SpareState::kFree;
  uint32_t rank = 0;
  uint32_t incarnation = 0;
};
uint64_t encode_claim(const SpareClaim& claim);
SpareClaim decode_claim(uint64_t word);

// Memory server 0's part, on the metadata region it just exposed (zeroed):
// parks every spare slot of `layout` from its first timestamp.
void park_spare_slots(const Layout& layout, std::byte* meta);

// Claims up to `want` free slots of `spares` (claim words at `offset`, 8
// bytes each) for this process; returns the indices claimed, in order, each
// of which the caller must run (for what is left of the run) and finish.
// *over: a closed slot was met (the run is over; claiming stopped there).
// Throws NamError if the results area cannot be reached.
std::vector<uint32_t> claim_spares(RemoteRegion& results, uint64_t offset, uint32_t spares,
                                   uint32_t want, uint32_t rank, uint32_t incarnation, bool* over);

// Marks slot `index`, which this process claimed, done (its summary is
// written). Throws NamError if the word is not this process's claim.
void finish_spare(RemoteRegion& results, uint64_t offset, uint32_t index, uint32_t rank,
                  uint32_t incarnation);

// The reporter's end of slot `index`: closes it if free; waits while it
// runs and the process that claimed it is alive (Cluster::alive, the same
// incarnation). Returns the final claim: kClosed (it never ran; the caller
// retires it), kDone, or kRunning (its process was lost: its client counts
// as dead).
SpareClaim settle_spare(Cluster& cluster, RemoteRegion& results, uint64_t offset, uint32_t index);

}  // namespace sluice::nam
