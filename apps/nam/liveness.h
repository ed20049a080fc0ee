// apps/nam/liveness.h: how compute clients learn that a memory server is
// gone, whatever the transport.
//
// One-sided operations on a region whose owner died report kPeerLost over
// ofi, but over shm they go on reaching the (still mapped) memory. So every
// memory server is also a source of a tiny shuffle flow "nam-alive" to every
// compute rank that never carries a record: the memory server closes it when
// the job is done. A compute rank's watcher thread drives its target with a
// Worker; a memory server that dies ends the flow with kPeerLost, and the
// watcher publishes the lost rank, which RsiClient checks before it begins a
// transaction and before its commit point (RsiOptions::lost_server). A
// client thus never commits, nor starts, after the loss is known.
//
// The end of a phase (meet_survivors): the ranks meet at a barrier of the
// ranks still alive, which no rank knows in advance when a rank is killed
// from outside (sluice run --kill), and agree on who met.
//
// Thread safety: lost() and why() from any thread; the rest from the thread
// that made the object; meet_survivors from any one thread of a rank.
#pragma once

#include <sluice/sluice.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::nam {

// The flow's spec; every rank declares it (memory servers as sources, the
// compute ranks as targets).
ShuffleSpec<uint64_t> alive_spec(const Cluster& cluster, uint32_t memory_servers);

// The memory server's end.
class AliveSource {
 public:
  AliveSource(Cluster& cluster, uint32_t memory_servers);
  // Ends the flow normally (the job is done).
  void close();

 private:
  ShuffleSpec<uint64_t> spec_;
  DeclaredFlow flow_;
  Source<uint64_t> source_;
};

// The compute rank's end: a thread watching the memory servers.
class ServerWatch {
 public:
  ServerWatch(Cluster& cluster, uint32_t memory_servers);
  ~ServerWatch();  // stops watching (within 100 ms)
  // -1 while every memory server is there; else the rank of one that is gone.
  const std::atomic<int64_t>& lost() const { return lost_; }
  std::string why() const;

 private:
  ShuffleSpec<uint64_t> spec_;
  DeclaredFlow flow_;
  std::atomic<int64_t> lost_{-1};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string why_;
  std::thread thread_;
};

// Meets the ranks of `candidates` that are still alive at a barrier and
// returns the ranks that met (increasing), the same on every rank that
// returns. Every rank of `candidates` that takes part calls it with the same
// `name` and `candidates` (which include the caller); a rank lost before or
// while they meet is left out. How: each rank tries the barrier
// `name` + the members it believes alive (Cluster::alive), and on a
// PeerLostError tries again without the lost rank. The registry completes a
// barrier for all of its members or for none (a member lost fails every
// waiter), a lost rank stays lost, and every member set a rank tries holds
// every rank not yet lost, the caller included; so any two sets tried share
// a rank, which passes at most one of them: at most one set completes.
// Throws what the barrier throws other than PeerLostError (e.g. the
// registry is gone). Blocks until the others arrive or are lost.
std::vector<uint32_t> meet_survivors(Cluster& cluster, const std::string& name,
                                     const std::vector<uint32_t>& candidates);

}  // namespace sluice::nam
