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
// Every request is one record on flow "nam-2pc-request" (clients -> servers,
// explicit targets, Latency: published at once) and every answer one on
// "nam-2pc-reply" (servers -> clients). A client waits for its answers in
// its Worker; a server serves in its Worker until every client closed.
//
// Errors: a lost server or client surfaces as PeerLostError naming it.
// Thread safety: one TwoPcClient per thread; one ResourceManager per server.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "layout.h"
#include "txn.h"

namespace sluice::nam {

struct TwoPcFlows {
  BytesShuffleSpec request{"nam-2pc-request"}, reply{"nam-2pc-reply"};
};
// The flows' specs, the same on every rank: clients are endpoints (rank,
// slot) of the compute ranks, slot = thread; servers are (rank, 0).
TwoPcFlows two_pc_flows(const Cluster& cluster, const Layout& layout, uint32_t clients_per_rank);

class ResourceManager {
 public:
  // `tables[t]`: this server's region bytes of table t.
  ResourceManager(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                  std::vector<std::byte*> tables);
  ~ResourceManager();
  // Serves until every client has closed its requests; throws PeerLostError
  // if one is lost.
  void serve();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TwoPcClient final : public Transactions {
 public:
  // `client` is the global client id; the thread's endpoint is
  // (cluster.rank(), slot).
  TwoPcClient(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows, uint32_t client,
              uint32_t slot);
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
