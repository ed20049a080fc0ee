// apps/nam/spares.h: free client slots, which a process that takes a rank
// in the running job runs: a compute rank started again (`sluice run
// --restarts`, `--spares`) in place of the clients its first process lost,
// or a process that joins an elastic job (`sluice run --max-ranks M --join
// S`) in a rank number no process held when the run began.
//
// A client's timestamps are pre-assigned (layout.h), and a dead client's
// slot is retired for good by recovery, so a replacement cannot run as the
// client it replaces. The free slots are the `--spare-clients S` slots the
// layout adds (the last S client ids) and the slots of every compute rank
// that has no first process in the job when memory server 0 lays the run
// out (an elastic job's vacancies; a rank already lost or started again).
// They start *parked* (rsi.h, begin_read_only): memory server 0 sets their
// park words before any client begins, so while nobody runs them their
// pending timestamps hold no one back, exactly as a parked read-only
// client's do. A process that claims a slot takes the park over: its first
// begin() unparks it, which gives up every timestamp of the slot that
// others may have passed (the park protocol's own path, rsi.cc). Nothing
// else in the protocol changes. Under 2PC (whose timestamps memory server 0
// hands out) a free slot is not parked: nobody waits for a slot nobody
// runs, and a claimed one is served on flows of its own (twopc.h).
//
// Which process runs a slot is settled by one claim word per client slot
// in the results area on memory server 0, changed only by compare-and-swap:
//
//   owned: the slot's rank's first process runs it (never claimed)
//   free --claim (a new process)--> running --finish (it)--> done
//   free --close (the reporter, at the run's end)--> closed
//
// The reporter closes every slot still free before it recovers the clients
// that never retired (a closed slot is retired, not recovered: it never
// ran; under 2PC memory server 0 closes them earlier, before it stops
// serving: twopc.h), and waits for every running one until it is done or the process
// that claimed it is lost (then its clients are recovered as any dead
// client's). A process that comes after the close finds the run over.
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

enum class SpareState : uint8_t { kFree = 0, kRunning = 1, kDone = 2, kClosed = 3, kOwned = 4 };

// A claim word: the state, and for running and done the process that
// claimed the slot (its rank and incarnation).
struct SpareClaim {
  SpareState state = SpareState::kFree;
  uint32_t rank = 0;
  uint32_t incarnation = 0;
};
uint64_t encode_claim(const SpareClaim& claim);
SpareClaim decode_claim(uint64_t word);

// Memory server 0's choice, when it lays a run out: per client id of
// `layout`, 1 if the slot is free (a spare slot, or a slot of a compute
// rank whose first process is not alive in the job now: a vacancy, a rank
// lost or started again), 0 if its rank's first process runs it. Every
// rank learns it from the claim words and park words, not by choosing
// again.
// `clients_per_rank`: --clients (a compute rank r's slots are (r - M) x it
// onward, M the memory servers).
std::vector<uint8_t> free_slots(const Cluster& cluster, const Layout& layout,
                                uint32_t clients_per_rank);

// Memory server 0's part, on the metadata region it just exposed (zeroed):
// parks every free slot from its first timestamp.
void park_free_slots(const Layout& layout, std::byte* meta, const std::vector<uint8_t>& free);

// Memory server 0's part, on the results area it owns, before any client
// begins: one claim word per client id at `words` (8 bytes each): free, or
// owned.
void init_claims(std::byte* words, const std::vector<uint8_t>& free);

// Claims up to `want` free slots of `slots` (claim words at `offset`, 8
// bytes each) for this process; returns the indices claimed, in order, each
// of which the caller must run (for what is left of the run) and finish.
// Owned slots are passed over. *over: a closed slot was met (the run is
// over; claiming stopped there). Throws NamError if the results area
// cannot be reached.
std::vector<uint32_t> claim_spares(RemoteRegion& results, uint64_t offset, uint32_t slots,
                                   uint32_t want, uint32_t rank, uint32_t incarnation, bool* over);

// Marks slot `index`, which this process claimed, done (its summary is
// written). Throws NamError if the word is not this process's claim.
void finish_spare(RemoteRegion& results, uint64_t offset, uint32_t index, uint32_t rank,
                  uint32_t incarnation);

// Closes slot `index` if it is free; returns its claim after the attempt
// (kClosed if this call or an earlier one closed it).
SpareClaim close_spare(RemoteRegion& results, uint64_t offset, uint32_t index);

// The reporter's end of slot `index`: closes it if free; waits while it
// runs and the process that claimed it is alive (Cluster::alive, the same
// incarnation). Returns the final claim: kClosed (it never ran; the caller
// retires it), kDone, or kRunning (its process was lost: its client counts
// as dead).
SpareClaim settle_spare(Cluster& cluster, RemoteRegion& results, uint64_t offset, uint32_t index);

}  // namespace sluice::nam
