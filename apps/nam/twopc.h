// apps/nam/twopc.h: the baseline of sluice-nam: snapshot isolation with a
// message-based two-phase commit on shuffle flows, the shared-nothing
// architecture of "The End of Slow Networks" section 4.1. The memory
// servers become resource managers: they own their tables (the same slot
// layout as RSI, layout.h) and read, lock, validate, install and unlock on
// request; memory server 0 also hands out timestamps.
//
//   begin()   BEGIN to server 0 -> read timestamp (highest below which every
//             issued commit timestamp is done)
//   read()    READ to the record's server -> newest version visible
//   commit()  GET_TS to server 0 -> commit timestamp c; PREPARE (the
//             server's share of the write set) to every participant, which
//             validates and locks each record and installs the new version
//             under the lock; all yes: COMMIT to each (unlock: header := c),
//             else ABORT to those that said yes (roll back); DONE(c) to
//             server 0.
//
// Flows: per compute rank c, "nam-2pc-request-<c>" (c's client threads ->
// every server, explicit targets, Latency: published at once) and
// "nam-2pc-reply-<c>" (back), so that the loss of one compute rank fails
// only its own flows; and "nam-2pc-peer" (server -> server, with 2 or more
// memory servers) for the termination protocol below. A client waits for
// its answers in its Worker; a server serves in its Worker until every
// compute rank's requests ended.
//
// A coordinator (client) that dies. 2PC blocks a participant that voted yes
// until it hears the decision; here the coordinator is the client, and no
// decision outlives it except in the COMMITs it got to deliver. The
// resource managers therefore run the standard cooperative termination once
// a compute rank's requests end (cleanly or not): each reports, to server 0,
// the state of each of that rank's clients' last transaction here (its
// timestamp; prepared, committed or aborted); server 0 decides per client
// (commit if any server committed that timestamp, since a COMMIT went out;
// else abort: no one committed, and the dead coordinator can never send
// one) and sends the decision to every server, which commits (unlocks) or
// rolls back what it still holds prepared and answers RESOLVED; after all
// have, server 0 marks the client's outstanding timestamp done, so readers
// pass it. A requests flow that ends abnormally is the only trigger: the
// flows' liveness decides who is dead, and nothing arrives from a rank
// after its input ended. Survivors go on throughout (a conflict on a dead
// client's lock waits, in begin(), until its timestamp is done).
//
// A process new to the running job (a restarted or joining rank: spares.h)
// runs the free client slots it claimed, each on flows of its own,
// "nam-2pc-c<id>-<rank>-<incarnation>-request" and "-reply" (its thread's
// endpoint is slot 0 of each). Memory server 0 watches the claim words: it
// admits a claimed slot (once the termination of the compute rank the slot
// belonged to, if any, is over), tells every server (ADMIT, on the peer
// flow), and each declares the slot's flows and serves them as a compute
// rank's, termination included. Once the first processes' clients are all
// done, server 0 closes every slot still free (compare-and-swap, so a claim
// and the close never both win) and tells the others (FINISH): a server ends
// only after that, and after every admitted slot's requests ended.
//
// A memory server that dies fails every client (its replies end with
// PeerLost naming it) and every other server (its peer input does), never
// with wrong data.
//
// Thread safety: one TwoPcClient per thread; one ResourceManager per server.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "layout.h"
#include "rsi.h"
#include "txn.h"

namespace sluice::nam {

struct TwoPcFlows {
  uint32_t memory_servers = 1, clients_per_rank = 1;
  std::vector<uint32_t> compute;  // the compute ranks, ascending
  // Per compute rank (index in `compute`): its clients' requests and replies.
  std::vector<ShuffleSpec<Bytes>> request, reply;
  ShuffleSpec<Bytes> peer{"nam-2pc-peer"};  // servers -> servers (memory_servers > 1)
};
// The flows' specs, the same on every rank: clients are endpoints (rank,
// slot) of the compute ranks, slot = thread; servers are (rank, 0).
TwoPcFlows two_pc_flows(const Cluster& cluster, const Layout& layout, uint32_t clients_per_rank);
// Declares the flows this rank takes part in (a memory server: all; a
// compute rank: its own request and reply flows); keep them until done.
// On a memory server with `lost_at_setup`, a compute rank lost before its
// flows were declared does not fail the call: (*lost_at_setup)[k] says why
// (index k in flows.compute; empty for the ranks whose flows were declared),
// for the ResourceManager, which treats it as a rank whose requests ended.
std::vector<DeclaredFlow> declare_two_pc(Cluster& cluster, const TwoPcFlows& flows,
                                         std::vector<std::string>* lost_at_setup = nullptr);

// A free client slot's flows, run by process (rank, incarnation) new to
// the job: its one thread -> every server and back.
struct SlotFlows {
  ShuffleSpec<Bytes> request{""}, reply{""};
};
SlotFlows slot_flows(const Cluster& cluster, const Layout& layout, uint32_t client, uint32_t rank,
                     uint32_t incarnation);
// Declares them on the new process; returns once memory server 0 admitted
// the slot and every server declared them too.
std::vector<DeclaredFlow> declare_slot(Cluster& cluster, const SlotFlows& flows);

// Memory server 0's view of the free client slots (spares.h), for the
// ResourceManager: the claim words in the results area it owns (`words`,
// read in place), a handle to that area for closing them (`results`, at
// `offset`), and which slots are free (free_slots()).
struct FreeSlotWatch {
  const std::byte* words = nullptr;
  RemoteRegion* results = nullptr;
  uint64_t offset = 0;
  std::vector<uint8_t> free;
};

// What a resource manager did for clients whose requests ended abnormally.
struct TwoPcRecovery {
  uint64_t ranks_lost = 0, clients_resolved = 0, rolled_forward = 0, rolled_back = 0;
};

class ResourceManager {
 public:
  // `tables[t]`: this server's region bytes of table t. `lost_at_setup`:
  // declare_two_pc's (empty: every compute rank's flows were declared).
  // `slots`: memory server 0's (the other servers learn of admitted slots
  // from it; with no free slot nobody is admitted). `recover` false
  // (--no-recovery): a compute rank or slot whose requests end abnormally
  // makes serve() throw NamError naming it, instead of the termination
  // protocol resolving its clients' transactions.
  ResourceManager(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                  std::vector<std::byte*> tables, std::vector<std::string> lost_at_setup = {},
                  FreeSlotWatch slots = {}, bool recover = true);
  ~ResourceManager();
  // Serves until every compute rank's and admitted slot's requests ended,
  // the transactions of those that ended abnormally are resolved (a compute
  // rank lost before its ends opened counts as one whose requests ended
  // abnormally, with nothing to resolve) and no free slot can be claimed;
  // throws PeerLostError naming a memory server that is lost.
  void serve();
  const TwoPcRecovery& recovery() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TwoPcClient final : public Transactions {
 public:
  // `client` is the global client id; the thread's endpoint is
  // (cluster.rank(), slot).
  // Test builds: `kill` (KillPoint::kPrepared or kPartialCommit) on the
  // `kill_on_commit`-th commit that gets that far.
  TwoPcClient(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows, uint32_t client,
              uint32_t slot, KillPoint kill = KillPoint::kNone, uint64_t kill_on_commit = 1);
  // A free slot's client `client` on a new process (its endpoint: slot 0 of
  // `flows`, declared by declare_slot).
  TwoPcClient(Cluster& cluster, const Layout& layout, const SlotFlows& flows, uint32_t client);
  ~TwoPcClient() override;

  void begin() override;
  bool read(uint32_t table, uint64_t key, std::span<std::byte> out) override;
  void write(uint32_t table, uint64_t key, std::span<const std::byte> bytes) override;
  void insert(uint32_t table, uint64_t key, std::span<const std::byte> bytes) override;
  Outcome commit() override;
  void abort() override;
  // Closes this client's requests (the servers end when all did).
  void retire() override;
  const TxnStats& stats() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::nam
