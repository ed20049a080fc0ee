// apps/query/sockets.h: the sockets baseline exchange (the paper's original middleware).
//
// Plain blocking TCP: one connection per pair of processes, one sender
// thread per process that writes queued frames to the connections, and one
// receiver thread per connection that reads frames into the mailbox of
// their target worker. A frame carries the rows of one exchange for one
// target worker, batched up to RuntimeOptions::batch_bytes (or an
// end-of-exchange mark). Rows for a worker of the same process skip the
// network and go straight to its mailbox (as the paper's engine does). A
// worker blocks when the sender queue is full (64 frames) and, with no work,
// waits on its mailbox.
//
// Processes find each other through Cluster::allgather at start-up: each
// listens on an ephemeral port of the address it reaches the job's
// registry from, and publishes "ip:port".
//
// A connection that ends before the peer sent every end-of-exchange mark
// fails the exchanges still waiting for it ("PeerLost: rank N closed its
// connection").
//
// Thread safety: the mesh is shared by the process's workers; mailbox and
// send queue are guarded by mutexes (this baseline locks per frame).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exchange_internal.h"

namespace sluice::query {

struct Frame {
  uint32_t exchange = 0;
  uint32_t source_rank = 0;
  uint32_t kind = 0;  // 0 rows, 1 end of one source, 2 the source rank's connection ended
  std::vector<std::byte> data;
};

struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::deque<Frame> frames;
};

class SocketDriver;

class SocketMesh {
 public:
  // Connects to every other process. Throws QueryError naming what failed.
  SocketMesh(sluice::Cluster& cluster, const RuntimeOptions& options);
  // Sends what is queued, then closes the connections once the peers have closed theirs.
  ~SocketMesh();

  std::unique_ptr<SocketDriver> driver(QueryWorker& qw, uint32_t slot);
  std::unique_ptr<QueryWorker::Port> open(SocketDriver& d, ExchangeId x,
                                          const Runtime::Exchange& ex);

  // Queues a frame for worker `slot` of `rank` (blocks while 64 are queued);
  // a frame for this process goes to the mailbox at once.
  void send(uint32_t rank, uint32_t slot, Frame f);
  Mailbox& mailbox(uint32_t slot) { return *mailboxes_[slot]; }
  uint32_t rank() const { return rank_; }
  uint32_t threads() const { return threads_; }

 private:
  struct Out {
    uint32_t rank, slot;
    Frame frame;
  };
  void sender_loop();
  void receiver_loop(uint32_t peer);
  void post(uint32_t slot, Frame f);

  uint32_t rank_, world_, threads_, batch_bytes_;
  int listen_fd_ = -1;
  std::vector<int> fds_;  // per peer rank; -1 for this one
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  std::mutex out_m_;
  std::condition_variable out_cv_;
  std::deque<Out> out_;
  bool stopping_ = false;
  std::thread sender_;
  std::vector<std::thread> receivers_;
};

class SocketDriver final : public QueryWorker::Driver {
 public:
  SocketDriver(SocketMesh& mesh, QueryWorker& qw, uint32_t slot, size_t exchanges);
  size_t poll() override;
  void idle(size_t work) override;
  InputState state(ExchangeId x, std::string* why, std::optional<uint32_t>* lost_rank) override;

  void add_input(ExchangeId x, uint32_t stride, uint32_t sources);
  SocketMesh& mesh() { return mesh_; }
  uint32_t slot() const { return slot_; }

 private:
  struct Input {
    bool active = false;
    uint32_t stride = 8, sources = 0, ended = 0;
    std::vector<uint32_t> ended_by_rank;
  };
  SocketMesh& mesh_;
  QueryWorker& qw_;
  uint32_t slot_;
  std::vector<Input> inputs_;
  std::vector<bool> gone_;  // per rank: its connection ended
  std::deque<Frame> taken_;
  uint32_t rounds_ = 0;
};

}  // namespace sluice::query
