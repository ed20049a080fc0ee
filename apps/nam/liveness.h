// apps/nam/liveness.h: how compute clients learn that a memory server is
// gone, whatever the transport.
//
// One-sided operations on a region whose owner died report kPeerLost over
// ofi, but over shm they go on reaching the (still mapped) memory. So every
// compute rank runs a watcher thread on the job's membership views
// (Cluster::await_view): a memory server that is not in the current view (it
// died, stopped heart-beating or left), or came back as a new incarnation
// with none of its memory, is lost, and the watcher publishes its rank, which
// RsiClient checks before it begins a transaction and before its commit
// point (RsiOptions::lost_server). A client thus never commits, nor starts,
// after the loss is known. With fencing on (the default), a lost memory
// server on this host has exited before the view without it is seen.
//
// Nothing is set up between the ranks for it, so a rank lost while the job
// starts cannot fail the others' set-up (the flow this used to be could).
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

// The compute rank's end: a thread watching the memory servers (ranks 0 to
// memory_servers - 1) in the membership views.
class ServerWatch {
 public:
  ServerWatch(const Cluster& cluster, uint32_t memory_servers);
  ~ServerWatch();  // stops watching (within 100 ms)
  // -1 while every memory server is there; else the rank of one that is gone.
  const std::atomic<int64_t>& lost() const { return lost_; }
  std::string why() const;

 private:
  // Publishes the first memory server missing from `view` (or restarted in
  // it); false if every one is there.
  bool check(const View& view);

  const uint32_t memory_servers_;
  std::atomic<int64_t> lost_{-1};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string why_;
  std::thread thread_;
};

}  // namespace sluice::nam
