// The registry's state and its connection handling, shared by
// registry_server.cc (connections, timers, losses, the serve loop) and
// registry_requests.cc (what each request does). Private to src/control.
//
// Thread safety: none; the registry's one thread owns an Impl.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "control/metrics.h"
#include "control/metrics_http.h"
#include "control/protocol.h"
#include "control/registry_server.h"
#include "control/registry_waiters.h"

namespace sluice::control {
namespace registry_impl {

using Clock = RegistryClock;
using TimePoint = RegistryTime;
using std::chrono::milliseconds;

// After an ERROR (or LEAVE) the registry half-closes and waits this long for
// the peer's EOF, so that its last bytes are read rather than answered with a
// reset that could destroy the ERROR frame before the peer reads it.
constexpr milliseconds kCloseLinger{1000};
// Upper bound on one poll() sleep, so time-based checks never lag far.
constexpr milliseconds kMaxPollWait{1000};

const char* const kClosedReason = "connection closed (process exited or was killed)";

inline TimePoint deadline_after(uint64_t timeout_ms, TimePoint now) {
  // Anything beyond ~30 years is "no limit"; this also keeps the addition
  // below from overflowing.
  constexpr uint64_t kHuge = uint64_t{1} << 40;
  if (timeout_ms == 0 || timeout_ms > kHuge) return kNever;
  return now + milliseconds(timeout_ms);
}

// "ip:port" or "[ip6]:port" of a socket address.
std::string peer_name(const sockaddr_storage& ss);

}  // namespace registry_impl

using registry_impl::Clock;
using registry_impl::TimePoint;

struct RegistryServer::Impl : Waiters::Host {
  enum class RankState { kAbsent, kAlive, kLeft, kDied };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;  // "ip:port", for log lines
    FrameParser parser{/*check_version=*/true};
    std::string out;
    size_t out_pos = 0;
    int64_t rank = -1;      // >= 0 once HELLO was accepted
    bool observer = false;  // an observer's HELLO was accepted (rank stays -1)
    bool spare = false;  // a spare's or waiting joiner's HELLO was accepted; rank stays -1 until it
                         // takes one
    bool closing = false;     // refused or left: input is discarded until EOF
    bool write_shut = false;  // closing and every byte of `out` was sent
    // Closing, and the peer's EOF was read: reaped once `out` is sent (the
    // replies to what it sent before it left, e.g. a PUT before LEAVE), or
    // at the deadline.
    bool peer_closed = false;
    // Reaped at the end of the loop iteration. Set by drop(), which may run
    // while a caller iterates the waiter containers: everything else about
    // the connection's end (its rank's loss) waits for settle().
    bool dead = false;
    // Before HELLO: when the peer must have said it. Closing: when to stop
    // waiting for its EOF.
    TimePoint deadline = kNever;
    // Said a HELLO the registry accepted (a rank, an observer or a spare).
    bool authenticated() const { return rank >= 0 || observer || spare; }
  };

  // A spare's accepted HELLO, kept until a rank dies and the spare takes
  // its place (admit() then runs as for that rank's own HELLO).
  struct Spare {
    uint64_t conn_id = 0;
    uint32_t request_id = 0;
    HelloMsg hello;
  };
  // At most this many spares wait at once; more are refused.
  static constexpr size_t kMaxSpares = 1024;

  struct RankInfo {
    RankState state = RankState::kAbsent;
    std::string host;
    uint32_t pid = 0;
    std::string reason;
    uint64_t conn_id = 0;
    TimePoint last_seen;
    uint32_t incarnation = 0;  // times the rank joined again after it died
    std::string fence;         // its process's fence identity (HELLO)
    TimePoint lost_at;         // kDied/kLeft: when the registry declared it so
    // An elastic job's number no process has held yet (kLeft, incarnation
    // 0, RegistryOptions::initial_ranks): a joiner may take it.
    bool vacant = false;
  };

  explicit Impl(RegistryOptions o)
      : opt(std::move(o)),
        ranks(opt.world_size),
        waiters(*this, opt.world_size),
        metrics(opt.world_size) {
    if (opt.initial_ranks == 0 || opt.initial_ranks > opt.world_size)
      opt.initial_ranks = opt.world_size;
    for (uint32_t r = opt.initial_ranks; r < opt.world_size; ++r) {
      ranks[r].state = RankState::kLeft;
      ranks[r].vacant = true;
      ranks[r].reason = "a vacancy of this elastic job (no process has joined as it yet)";
    }
  }
  ~Impl() {
    for (auto& [id, c] : conns) ::close(c->fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void bind_and_listen();
  void serve();
  void accept_all(TimePoint now);
  void cap_unauthenticated();
  void on_readable(Conn& c, TimePoint now);
  void handle_frame(Conn& c, const Frame& f, TimePoint now);
  void on_hello(Conn& c, const Frame& f, TimePoint now);
  // A HELLO that asks to join (kJoinRank): the lowest vacancy or rank that
  // left, or (the job is full) a place in `joiners` until one frees.
  void on_join(Conn& c, const HelloMsg& m, uint32_t request_id, TimePoint now);
  // The lowest vacancy or rank that left, if any (-1: the job is full).
  int64_t free_rank() const;
  // Gives free rank numbers to the joiners that waited longest.
  void place_joiners();
  // Queues `c` (its HELLO `m`) in `queue`, silent until it gets a rank, or
  // refuses it if kMaxSpares already wait there ("too many <who>: ...
  // already wait for <what>"). True if queued.
  bool enqueue(Conn& c, const HelloMsg& m, uint32_t request_id, std::vector<Spare>& queue,
               const char* who, const char* what);
  // Accepts `c` as rank `rank` (its HELLO `m`, or a spare's taking the rank's
  // place): the join, or a dead rank's next incarnation, or (a joiner's) a
  // vacancy's or left rank's next. REQUIRES: rank is absent or died, or
  // left for a joiner.
  void admit(Conn& c, const HelloMsg& m, uint32_t rank, uint32_t request_id, TimePoint now,
             const char* as);
  // Gives the lowest died rank to the spare that waited longest, if there
  // are both; true if it did.
  bool place_spare();
  void on_declare(Conn& c, const Frame& f, TimePoint now);
  void on_put(Conn& c, const Frame& f);
  void on_get(Conn& c, const Frame& f, TimePoint now);
  void on_erase(Conn& c, const Frame& f);
  void on_undeclare(Conn& c, const Frame& f, TimePoint now);
  void on_barrier(Conn& c, const Frame& f, TimePoint now);
  void on_gather(Conn& c, const Frame& f, TimePoint now);
  void on_counters(Conn& c, const Frame& f);
  WelcomeMsg welcome_message() const;
  std::string render_metrics() const;
  std::string address() const {
    if (opt.bind_host.find(':') != std::string::npos)
      return log::cat("[", opt.bind_host, "]:", port);
    return log::cat(opt.bind_host, ":", port);
  }
  bool binds_wildcard() const {
    return opt.bind_host.empty() || opt.bind_host == "0.0.0.0" || opt.bind_host == "::";
  }
  // The job's name in metrics: the address ranks reach the registry at, as
  // ranks and `sluice top` name the job. With a wildcard bind that is the
  // local address the first rank connected to, not "0.0.0.0:PORT".
  std::string job_label() const {
    if (!binds_wildcard()) return address();
    if (!joined_address.empty()) return joined_address;
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return log::cat(buf, ":", port);
  }
  std::string joined_address;  // see job_label()
  void on_timers(TimePoint now);
  TimePoint next_timer() const;
  void flush(Conn& c);
  void reap();

  void send(Conn& c, MsgType type, uint32_t request_id, const std::string& payload);
  void reply(const Waiter& w, MsgType type, const std::string& payload) override;
  void refuse(Conn& c, ErrorCode code, const std::string& problem, uint32_t request_id);
  void start_closing(Conn& c, TimePoint now);
  void drop(Conn& c, const std::string& reason);
  // Announces the losses drop() queued and gives died ranks to spares.
  void settle();
  void lose_rank(uint32_t rank, RankState state, const std::string& reason);
  // After `epoch` moved: the view-change log line (the new epoch, its cause
  // and `detail`, the members) and the metrics' count of changes by cause
  // ("died", "left", "rejoined").
  void announce_view(const char* cause, uint32_t rank, const std::string& detail);
  void broadcast(const PeerEventMsg& event, uint64_t except_conn);

  // A queued spare's or joiner's connection, if it still waits: not
  // refused, and not closed by its peer, even where the loop has not read
  // that end yet (a joiner closed just before a rank left must not be
  // handed its number). A waiting peer sends nothing, so a peek that finds
  // the end of the stream, or an error, is its close.
  Conn* waiting_conn(uint64_t id) {
    Conn* c = find_conn(id);
    if (c == nullptr || c->closing) return nullptr;
    char byte;
    const ssize_t n = ::recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return nullptr;
    return c;
  }
  Conn* find_conn(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }
  const Conn* find_conn(uint64_t id) const {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }
  bool lost(uint32_t r) const override {
    return ranks[r].state == RankState::kLeft || ranks[r].state == RankState::kDied;
  }
  bool left(uint32_t r) const override { return ranks[r].state == RankState::kLeft; }
  bool absent(uint32_t r) const override { return ranks[r].state == RankState::kAbsent; }
  uint64_t epoch_now() const override { return epoch; }
  uint32_t incarnation_of(uint32_t r) const override { return ranks[r].incarnation; }
  std::string describe(uint32_t r) const override;
  std::string describe_missing(const std::vector<uint32_t>& missing) const override;

  RegistryOptions opt;
  int listen_fd = -1;
  int wake_fd = -1;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  TimePoint accept_paused_until{};
  uint64_t next_conn_id = 1;
  uint64_t evicted = 0;  // connections closed by cap_unauthenticated()
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  std::vector<RankInfo> ranks;
  // The membership view's epoch: 0 for the job as launched (every rank), one
  // more at every loss, departure and rejoin (PEER_EVENT carries it).
  uint64_t epoch = 0;
  Waiters waiters;
  // Ranks whose connection was dropped and whose loss lose_rank() has not
  // yet announced: (rank, connection id, reason). See drop() and settle().
  struct PendingLoss {
    uint32_t rank;
    uint64_t conn_id;
    std::string reason;
  };
  std::vector<PendingLoss> pending_losses;
  std::vector<Spare> spares;   // waiting, oldest first
  std::vector<Spare> joiners;  // waiting for a free rank number, oldest first
  JobMetrics metrics;
  std::unique_ptr<MetricsHttp> metrics_http;  // null unless opt.metrics
  uint64_t counters_rejected = 0;             // for rate-limiting their log lines
};

}  // namespace sluice::control
