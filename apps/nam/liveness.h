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
// Thread safety: lost() and why() from any thread; the rest from the thread
// that made the object.
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

}  // namespace sluice::nam
