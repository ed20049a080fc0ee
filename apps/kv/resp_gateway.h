// apps/kv/resp_gateway.h: the store's Redis-protocol (RESP2) front end. A
// client rank of `sluice-kv run --resp-port P` listens on TCP port P + its
// client index and turns each request of each connection into commands of
// one of its rank's closed-loop Clients (a connection keeps to one client,
// round robin over --clients-per-rank, so its commands go through the
// replicated log one at a time, in arrival order, while other connections'
// go side by side), and each completed command into the reply, in request
// order per connection:
//
//   PING [msg]            +PONG, or msg (answered here)
//   GET key               bulk value, or null
//   SET key value         +OK (no options)
//   DEL key [key ...]     :number deleted
//   EXISTS key [key ...]  :number present
//   CAS key old new       :1 if key held old and now holds new, else :0
//                         (sluice-kv's compare-and-set, not a Redis command)
//   INFO, CONFIG GET, COMMAND, SELECT 0, QUIT, SHUTDOWN
//
// Keys and values: a key and its value take at most kMaxEntryBytes in all
// (they travel in flow records and log messages of bounded size); longer
// ones get an error reply. A protocol error (resp.h: garbage, a bulk length
// over 1 MiB, ...) gets an error reply and the connection is closed; the
// gateway and the store go on. A peer that sends without reading is not
// read from until its replies drain. SHUTDOWN stops the gateway: it answers +OK,
// takes no more requests, finishes what is in flight, and the job then ends
// as a workload's does, with rank 0's checks.
//
// Thread safety: one thread (the rank's worker loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client.h"

namespace kv {

inline constexpr size_t kMaxEntryBytes = 256;
// A connection is not read from while this much of its replies is unsent or
// this many of its requests are unanswered (a peer that pipelines without
// reading cannot grow the gateway's memory without bound).
inline constexpr size_t kMaxUnsentBytes = size_t{1} << 20;
inline constexpr size_t kMaxPendingReplies = 4096;

class RespGateway {
 public:
  // Listens on `port` (0: a port the kernel picks) on every address.
  // Throws std::runtime_error naming the port if it cannot.
  explicit RespGateway(uint16_t port);
  ~RespGateway();
  RespGateway(const RespGateway&) = delete;
  RespGateway& operator=(const RespGateway&) = delete;

  uint16_t port() const { return port_; }

  // Accepts connections, reads and parses requests, hands commands to the
  // connections' clients, and writes the replies of completed ones. Never
  // blocks.
  // Returns how much it did (0: nothing), for the worker's idle().
  size_t poll(ClientGroup& clients);
  // Sleeps in poll(2) on the sockets for at most `timeout` (call it when the
  // client has nothing in flight, instead of the worker's idle()).
  void wait(std::chrono::milliseconds timeout);

  // SHUTDOWN was received: no more requests are taken.
  bool stopping() const { return stopping_; }
  // Stopping, and every reply written or its connection gone.
  bool finished() const;

  struct Stats {
    uint64_t connections = 0, requests = 0, protocol_errors = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  enum class Kind : uint8_t { kLocal, kGet, kSet, kCount, kCas };
  struct Reply {  // one request's answer, in request order
    Kind kind = Kind::kLocal;
    std::string text;      // once ready
    uint32_t waiting = 0;  // commands still in flight
    int64_t count = 0;     // kCount: how many succeeded
    bool ready = false;
  };
  struct Conn {
    int fd = -1;
    std::string in, out;
    std::deque<Reply> replies;  // (a deque keeps each Reply in place: inflight points at it)
    bool closing = false;       // close once `out` is written (QUIT, a protocol error)
    bool gone = false;          // the peer closed or failed: replies are dropped
    bool readable = false;      // epoll said so, and it has not been read dry since
    bool writable = true;       // no send has found its buffer full since epoll said so
    uint32_t watched = 0;       // the epoll events registered for it
  };
  // One client's commands in flight, in seq order from `first`: the reply
  // each goes into (nullptr once answered).
  struct InFlight {
    uint64_t first = 1;
    std::deque<Reply*> replies;
  };

  bool held(const Conn& c) const {
    return c.out.size() > kMaxUnsentBytes || c.replies.size() > kMaxPendingReplies;
  }
  void watch(uint64_t id, Conn& c);
  size_t accept_all();
  size_t read(Conn& c, uint64_t id, ClientGroup& clients);
  void handle(Conn& c, std::vector<std::string>& args, Client& client, size_t index);
  void complete(ClientGroup& clients);
  void complete(const Client& client, size_t index, size_t& seen);
  size_t write(Conn& c);

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  uint16_t port_ = 0;
  bool stopping_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Conn> conns_;
  std::vector<InFlight> inflight_;      // per client of the group
  size_t inflight_count_ = 0;           // commands in flight, all clients
  std::vector<size_t> completed_seen_;  // per client of the group
  Stats stats_;
};

}  // namespace kv
