// The client side of the registry, owned by a Cluster. connect() joins the job
// (HELLO with rank, world size, host name, pid and secret) and starts one
// control thread that does all the socket I/O: it sends queued requests and
// heart-beats (every heartbeat_timeout / 5) without blocking, and reads
// replies, heartbeat replies and peer events. A registry that sends nothing
// for the heartbeat timeout (the smaller of ours and its own), or accepts
// none of our bytes for as long, is lost: PeerTable::registry_lost() turns
// true and every pending and later call throws Error(kRegistry). The data
// plane never calls in here: it reads the PeerTable's atomics on its slow
// path only.
//
// Thread safety: every method may be called from any thread concurrently;
// each blocking call waits only for its own reply.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/bootstrap.h"
#include "control/peer_table.h"
#include "control/protocol.h"
#include "sluice/deadline.h"

namespace sluice::control {

struct ClientOptions {
  std::chrono::milliseconds heartbeat_timeout{
      5000};  // the registry's limit; heart-beat every 1/5 of it
  std::chrono::milliseconds connect_timeout{
      60000};  // total time to keep retrying connect (bounded backoff)
  // Requests waiting for the control thread to send them are bounded: a call
  // whose request would take the bytes not yet sent beyond this throws
  // Error(kResource) naming the limit instead of queueing (the registry is
  // not reading, or far too many calls are outstanding). Heart-beats and
  // LEAVE are exempt (a few bytes each, sent at most once per interval).
  // Default 64 MiB (the registry's own limit per connection).
  size_t max_queued_bytes = size_t{64} << 20;
  // Called with the new epoch whenever the membership view moved (on the
  // control thread, or in connect() for WELCOME's view); it must not block
  // nor call this client. Empty: none.
  std::function<void(uint64_t epoch)> on_epoch;
  // Fence a rank reported died whose process is on this host (control/fence.h)
  // before the view moves past it.
  bool fence_lost_ranks = true;
  // Called on the control thread with a rank reported died (or left) and
  // its incarnation, before the view moves past it (the Cluster fences its
  // regions there). It may wait briefly; it must not call this client.
  std::function<void(uint32_t rank, uint32_t incarnation)> on_lost;
};

class RegistryClient {
 public:
  // Connects (retrying with bounded backoff until connect_timeout), sends
  // HELLO, waits for WELCOME. Throws Error(kAuth) on a wrong secret,
  // Error(kProtocol) on a version mismatch naming both versions,
  // Error(kTimeout) naming the address if nothing answers, Error(kRegistry)
  // for any other refusal (duplicate rank, rank >= world size...).
  static std::unique_ptr<RegistryClient> connect(const BootstrapInfo& info,
                                                 const ClientOptions& options);
  // Sends LEAVE (so peers see "left") if the socket takes it at once and
  // joins the control thread; never waits for the registry.
  ~RegistryClient();
  // Sends LEAVE, half-closes and waits until `deadline` for the registry to
  // close its side; true if it did (it read everything this rank sent).
  // Every call after it fails as if the registry were lost. Once only.
  bool leave(Deadline deadline);

  uint32_t rank() const;
  uint32_t world_size() const;
  PeerTable& peers();
  // The numeric IP address this process reaches the registry from: the
  // interface data should use too. Empty if it cannot be read.
  std::string local_address() const;

  // Declares flow `name` with its canonical spec text; returns once every
  // rank in `participants` declared it identically. Throws
  // Error(kSpecMismatch) naming both ranks and each differing field
  // ("record_size: rank 0 declared 16, rank 2 declared 24"), Error(kTimeout)
  // naming the ranks that have not declared, or PeerLostError. With an
  // `epoch` (a view's), the declaration belongs to that view: Error(kViewChanged)
  // if the job is in another view, or moves on before every participant
  // declared (every participant that declared gets it alike).
  void declare_flow(const std::string& name, const std::string& canonical,
                    const std::vector<uint32_t>& participants, Deadline deadline,
                    uint64_t epoch = kUnscopedEpoch);
  // Withdraws this rank from flow `name` (which it declared); returns once
  // every participant did so or is lost, by when the registry has forgotten
  // the declaration and erased every key under "flow/<name>/": the name can
  // be declared again. Throws Error(kTimeout) naming the participants that
  // have not withdrawn (the withdrawal still counts), Error(kInvalidArgument)
  // if this rank has not declared the flow.
  void undeclare_flow(const std::string& name, Deadline deadline);
  // The same without waiting: `done` runs once with "" when every
  // participant withdrew (or is lost), or with the error's text; on the
  // control thread, so it must be quick and must not call the client.
  // Throws as a call does if the request cannot be queued.
  void undeclare_flow_async(const std::string& name, Deadline deadline,
                            std::function<void(std::string)> done);
  // Erases `key`, or with prefix = true every key that starts with `key`;
  // returns how many keys went. A get() waiting for an erased key keeps
  // waiting (until it is put again or its deadline).
  uint64_t erase(const std::string& key, bool prefix = false);
  // Stores key -> value (overwrites).
  void put(const std::string& key, const std::string& value);
  // The same without waiting for the registry's answer; a failure is logged.
  // Ordered with the calls after it, as every request is.
  void put_async(const std::string& key, const std::string& value);
  // Waits until `key` exists and returns its value. If `owner_rank` >= 0 and
  // that rank dies or leaves before putting it, throws PeerLostError.
  // Throws Error(kTimeout) naming the key on deadline.
  // With `owner_incarnation` (kAnyIncarnation: any), the key is awaited
  // from that process of the owner only: PeerLostError once it died, even
  // if the rank rejoined since (what a flow pinned to it must see).
  std::string get(const std::string& key, Deadline deadline, int64_t owner_rank = -1,
                  uint32_t owner_incarnation = kAnyIncarnation);
  // Waits until every rank of the job entered barrier `name` for the n-th
  // time (the registry counts generations per name and endpoint; a call that
  // failed does not count) and returns n, counted from 0: the same for every
  // rank of that meeting. Concurrent calls of one rank are counted in the
  // order the registry receives them. Throws Error(kTimeout) naming missing
  // ranks, or PeerLostError.
  uint64_t barrier(const std::string& name, Deadline deadline);
  // The same for a set of endpoints (rank << 32 | slot), `self` among them.
  uint64_t barrier(const std::string& name, const std::vector<uint64_t>& members, uint64_t self,
                   Deadline deadline);
  // A view-scoped allgather: `value` as this rank's contribution to the n-th
  // gather `name` of view `epoch`; returns every member's value. Throws
  // Error(kViewChanged) if the view is not current or changes first (the
  // PeerTable has the new view by then), Error(kTimeout) naming the members
  // that have not called, Error(kInvalidArgument) if this rank's previous
  // call of `name` still waits.
  GatheredMsg gather(const std::string& name, uint64_t epoch, const std::string& value,
                     Deadline deadline);

 private:
  struct Impl;
  explicit RegistryClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::control
