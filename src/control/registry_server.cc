#include "control/registry_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "control/metrics.h"
#include "control/metrics_http.h"
#include "control/protocol.h"
#include "control/registry_waiters.h"
#include "control/tcp_liveness.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

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

TimePoint deadline_after(uint64_t timeout_ms, TimePoint now) {
  // Anything beyond ~30 years is "no limit"; this also keeps the addition
  // below from overflowing.
  constexpr uint64_t kHuge = uint64_t{1} << 40;
  if (timeout_ms == 0 || timeout_ms > kHuge) return kNever;
  return now + milliseconds(timeout_ms);
}

std::string peer_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return log::cat(host, ":", port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return log::cat("[", host, "]:", port);
  }
  return "?";
}

// Constant-time comparison, so the reply time does not reveal how much of a
// guessed secret was right.
bool secrets_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

struct RegistryServer::Impl : Waiters::Host {
  enum class RankState { kAbsent, kAlive, kLeft, kDied };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;  // "ip:port", for log lines
    FrameParser parser{/*check_version=*/true};
    std::string out;
    size_t out_pos = 0;
    int64_t rank = -1;        // >= 0 once HELLO was accepted
    bool observer = false;    // an observer's HELLO was accepted (rank stays -1)
    bool closing = false;     // refused or left: input is discarded until EOF
    bool write_shut = false;  // closing and every byte of `out` was sent
    // Reaped at the end of the loop iteration. Set by drop(), which may run
    // while a caller iterates the waiter containers: everything else about
    // the connection's end (its rank's loss) waits for settle().
    bool dead = false;
    // Before HELLO: when the peer must have said it. Closing: when to stop
    // waiting for its EOF.
    TimePoint deadline = kNever;
  };

  struct RankInfo {
    RankState state = RankState::kAbsent;
    std::string host;
    uint32_t pid = 0;
    std::string reason;
    uint64_t conn_id = 0;
    TimePoint last_seen;
    uint32_t incarnation = 0;  // times the rank joined again after it died
  };

  explicit Impl(RegistryOptions o)
      : opt(std::move(o)),
        ranks(opt.world_size),
        waiters(*this, opt.world_size),
        metrics(opt.world_size) {}
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
  void on_declare(Conn& c, const Frame& f, TimePoint now);
  void on_put(Conn& c, const Frame& f);
  void on_get(Conn& c, const Frame& f, TimePoint now);
  void on_erase(Conn& c, const Frame& f);
  void on_undeclare(Conn& c, const Frame& f, TimePoint now);
  void on_barrier(Conn& c, const Frame& f, TimePoint now);
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
  void settle();
  void lose_rank(uint32_t rank, RankState state, const std::string& reason);
  void broadcast(const PeerEventMsg& event, uint64_t except_conn);

  Conn* find_conn(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }
  bool lost(uint32_t r) const override {
    return ranks[r].state == RankState::kLeft || ranks[r].state == RankState::kDied;
  }
  bool absent(uint32_t r) const override { return ranks[r].state == RankState::kAbsent; }
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
  Waiters waiters;
  // Ranks whose connection was dropped and whose loss lose_rank() has not
  // yet announced: (rank, connection id, reason). See drop() and settle().
  struct PendingLoss {
    uint32_t rank;
    uint64_t conn_id;
    std::string reason;
  };
  std::vector<PendingLoss> pending_losses;
  JobMetrics metrics;
  std::unique_ptr<MetricsHttp> metrics_http;  // null unless opt.metrics
  uint64_t counters_rejected = 0;             // for rate-limiting their log lines
};

void RegistryServer::Impl::bind_and_listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(opt.port);
  const std::string where = log::cat(opt.bind_host, ":", opt.port);
  if (int rc = ::getaddrinfo(opt.bind_host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    throw Error(ErrorCode::kResource, log::cat("registry cannot resolve its bind address ", where,
                                               ": ", gai_strerror(rc)));
  }
  std::string last_error = "no addresses";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // A restarted registry must be able to take its port back while old
    // connections sit in TIME_WAIT.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd < 0) {
    throw Error(ErrorCode::kResource,
                log::cat("registry cannot listen on ", where, ": ", last_error,
                         "; choose another address or port (port 0 picks a free one)"));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    throw Error(ErrorCode::kResource,
                log::cat("registry cannot create an eventfd: ", std::strerror(errno)));
  }
}

std::string RegistryServer::Impl::describe(uint32_t r) const {
  const RankInfo& info = ranks[r];
  std::string s = log::cat("rank ", r);
  if (!info.host.empty()) s += log::cat(" (", info.host, ", pid ", info.pid, ")");
  switch (info.state) {
    case RankState::kAbsent:
      return s + " has not joined";
    case RankState::kAlive:
      return s + " is alive";
    case RankState::kLeft:
      return s + " left the job";
    case RankState::kDied:
      return s + " died: " + info.reason;
  }
  return s;
}

std::string RegistryServer::Impl::describe_missing(const std::vector<uint32_t>& missing) const {
  std::string details;
  for (uint32_t r : missing) {
    if (!details.empty()) details += "; ";
    const RankInfo& info = ranks[r];
    if (info.state == RankState::kAbsent) {
      details += log::cat("rank ", r, " has not joined");
    } else {
      details += log::cat("rank ", r, " on ", info.host);
    }
  }
  return log::cat(missing.size() == 1 ? "rank " : "ranks ", rank_list_text(missing), " (", details,
                  ")");
}

void RegistryServer::Impl::send(Conn& c, MsgType type, uint32_t request_id,
                                const std::string& payload) {
  if (c.dead || c.write_shut) return;
  c.out += make_frame(type, request_id, payload);
  if (c.out.size() - c.out_pos > opt.max_queued_bytes) {
    drop(c, log::cat("not reading registry messages (more than ", opt.max_queued_bytes,
                     " bytes queued)"));
  }
}

void RegistryServer::Impl::reply(const Waiter& w, MsgType type, const std::string& payload) {
  if (Conn* c = find_conn(w.conn_id)) send(*c, type, w.request_id, payload);
}

void RegistryServer::Impl::start_closing(Conn& c, TimePoint now) {
  c.closing = true;
  c.deadline = now + kCloseLinger;
}

void RegistryServer::Impl::refuse(Conn& c, ErrorCode code, const std::string& problem,
                                  uint32_t request_id) {
  log::warn("registry: rejected connection from ", c.peer,
            c.rank >= 0 ? log::cat(" (rank ", c.rank, ")") : std::string(), ": ", problem);
  send(c, MsgType::kError, request_id, encode(ErrorMsg{code, kNoRank, problem}));
  if (c.dead) return;
  start_closing(c, Clock::now());
  if (c.rank >= 0 && ranks[c.rank].conn_id == c.id && ranks[c.rank].state == RankState::kAlive) {
    lose_rank(static_cast<uint32_t>(c.rank), RankState::kDied,
              "sent a malformed control message: " + problem);
  }
}

void RegistryServer::Impl::drop(Conn& c, const std::string& reason) {
  if (c.dead) return;
  c.dead = true;
  // drop() runs from send(), which runs while callers iterate the very
  // containers lose_rank() erases from (the Waiters' tables): the
  // loss is only queued here and announced by settle() once the current
  // handler returned. Until then no reply reaches the connection (it is dead).
  if (c.rank >= 0 && ranks[c.rank].conn_id == c.id && ranks[c.rank].state == RankState::kAlive) {
    pending_losses.push_back(PendingLoss{static_cast<uint32_t>(c.rank), c.id, reason});
  }
}

void RegistryServer::Impl::settle() {
  // lose_rank() may drop further connections (its PEER_EVENTs can overflow
  // them), which queues more losses: loop until none is left.
  while (!pending_losses.empty()) {
    const PendingLoss loss = std::move(pending_losses.front());
    pending_losses.erase(pending_losses.begin());
    const RankInfo& info = ranks[loss.rank];
    if (info.state != RankState::kAlive || info.conn_id != loss.conn_id) continue;
    lose_rank(loss.rank, RankState::kDied, loss.reason);
  }
}

void RegistryServer::Impl::broadcast(const PeerEventMsg& event, uint64_t except_conn) {
  const std::string payload = encode(event);
  for (const RankInfo& info : ranks) {
    if (info.state != RankState::kAlive || info.conn_id == except_conn) continue;
    if (Conn* c = find_conn(info.conn_id)) send(*c, MsgType::kPeerEvent, 0, payload);
  }
}

void RegistryServer::Impl::lose_rank(uint32_t r, RankState state, const std::string& reason) {
  RankInfo& info = ranks[r];
  info.state = state;
  info.reason = reason;
  const uint64_t gone_conn = info.conn_id;
  const std::string who = describe(r);
  if (state == RankState::kLeft) {
    log::info("registry: ", who);
  } else {
    log::warn("registry: ", who);
  }
  broadcast(PeerEventMsg{r, state == RankState::kLeft ? PeerState::kLeft : PeerState::kDied, reason,
                         info.host, info.pid, info.incarnation},
            gone_conn);
  waiters.lose_rank(r, gone_conn, who);
  if (opt.on_lost_rank) opt.on_lost_rank(r);
}

void RegistryServer::Impl::accept_all(TimePoint now) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd =
        ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays queued; pausing keeps poll() from
        // spinning on it until a descriptor frees up.
        log::warn("registry: cannot accept a connection: ", std::strerror(errno),
                  "; raise the file descriptor limit (ulimit -n)");
        accept_paused_until = now + milliseconds(100);
      }
      return;
    }
    // Control messages are small request/reply pairs: Nagle would only add
    // latency to every barrier.
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_tcp_liveness(fd, opt.heartbeat_timeout);
    auto c = std::make_unique<Conn>();
    c->id = next_conn_id++;
    c->fd = fd;
    c->peer = peer_name(ss);
    c->deadline = now + opt.heartbeat_timeout;
    conns.emplace(c->id, std::move(c));
    cap_unauthenticated();
  }
}

void RegistryServer::Impl::cap_unauthenticated() {
  size_t waiting = 0;
  for (const auto& [id, c] : conns) {
    if (c->rank < 0 && !c->observer && !c->closing && !c->dead) ++waiting;
  }
  // conns is ordered by id, which grows with every accept: oldest first.
  for (auto it = conns.begin(); waiting > opt.max_unauthenticated && it != conns.end(); ++it) {
    Conn& c = *it->second;
    if (c.rank >= 0 || c.observer || c.closing || c.dead) continue;
    c.dead = true;
    --waiting;
    // One line per burst, not per connection: a flood must not flood the log too.
    if (++evicted % 100 == 1) {
      log::warn("registry: more than ", opt.max_unauthenticated,
                " connections have not said HELLO; closed the oldest (from ", c.peer, "; ", evicted,
                " so far)");
    }
  }
}

void RegistryServer::Impl::on_readable(Conn& c, TimePoint now) {
  char buf[64 * 1024];
  // Bounded per wake-up so one chatty peer cannot starve the others.
  size_t total = 0;
  while (!c.dead && total < kMaxPayload) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (c.closing) continue;
      if (c.rank >= 0 && ranks[c.rank].conn_id == c.id) ranks[c.rank].last_seen = now;
      c.parser.append(buf, static_cast<size_t>(n));
      for (;;) {
        Frame f;
        ErrorCode code = ErrorCode::kProtocol;
        std::string problem;
        const FrameParser::Result res = c.parser.next(&f, &code, &problem);
        if (res == FrameParser::Result::kNeedMore) break;
        if (res == FrameParser::Result::kBad) {
          refuse(c, code, problem, 0);
          break;
        }
        handle_frame(c, f, now);
        if (c.closing || c.dead) break;
      }
      continue;
    }
    if (n == 0) {
      if (c.closing) {
        c.dead = true;
      } else {
        drop(c, kClosedReason);
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    drop(c, log::cat("connection error: ", std::strerror(errno)));
    return;
  }
}

void RegistryServer::Impl::handle_frame(Conn& c, const Frame& f, TimePoint now) {
  const auto type = static_cast<MsgType>(f.header.type);
  const uint32_t req = f.header.request_id;
  if (c.observer) {
    // A tool that reads, never a rank: GET, HEARTBEAT and LEAVE only.
    switch (type) {
      case MsgType::kGet:
        return on_get(c, f, now);
      case MsgType::kHeartbeat:
        send(c, MsgType::kHeartbeat, 0, "");
        return;
      case MsgType::kLeave:
        start_closing(c, now);
        return;
      default:
        refuse(c, ErrorCode::kProtocol,
               log::cat("an observer may send GET, HEARTBEAT and LEAVE, not ", to_string(type)),
               req);
        return;
    }
  }
  if (c.rank < 0) {
    if (type == MsgType::kHello) {
      on_hello(c, f, now);
    } else {
      refuse(c, ErrorCode::kProtocol,
             log::cat("the first message must be HELLO, got ", to_string(type)), req);
    }
    return;
  }
  switch (type) {
    case MsgType::kDeclare:
      return on_declare(c, f, now);
    case MsgType::kPut:
      return on_put(c, f);
    case MsgType::kGet:
      return on_get(c, f, now);
    case MsgType::kBarrier:
      return on_barrier(c, f, now);
    case MsgType::kErase:
      return on_erase(c, f);
    case MsgType::kUndeclare:
      return on_undeclare(c, f, now);
    case MsgType::kHeartbeat:
      if (!f.payload.empty()) {
        refuse(c, ErrorCode::kProtocol, "malformed HEARTBEAT message", req);
        return;
      }
      // The reply is how the client knows that the registry is alive.
      send(c, MsgType::kHeartbeat, 0, "");
      return;
    case MsgType::kCounters:
      return on_counters(c, f);
    case MsgType::kLeave:
      lose_rank(static_cast<uint32_t>(c.rank), RankState::kLeft, "left the job");
      start_closing(c, now);
      return;
    case MsgType::kHello:
      refuse(c, ErrorCode::kProtocol, "HELLO sent twice on one connection", req);
      return;
    default:
      refuse(c, ErrorCode::kProtocol,
             log::cat("unexpected ", to_string(type), " message from a client"), req);
      return;
  }
}

void RegistryServer::Impl::on_hello(Conn& c, const Frame& f, TimePoint now) {
  const uint32_t req = f.header.request_id;
  HelloMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed HELLO message", req);
    return;
  }
  if (!secrets_equal(m.secret, opt.secret)) {
    refuse(c, ErrorCode::kAuth, "wrong job secret", req);
    return;
  }
  if (m.rank == kNoRank && m.world_size == 0) {
    // An observer (`sluice info --registry`): it reads the job's members
    // and their keys, and is never one of them.
    c.observer = true;
    c.deadline = kNever;
    log::info("registry: an observer connected from ", m.host, " (pid ", m.pid, ", ", c.peer, ")");
    send(c, MsgType::kWelcome, req, encode(welcome_message()));
    return;
  }
  if (m.world_size != opt.world_size) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("rank ", m.rank, " says the job has ", m.world_size,
                    " ranks, but this registry serves a job of ", opt.world_size, " ranks"),
           req);
    return;
  }
  if (m.rank >= opt.world_size) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("rank ", m.rank, " is out of range: the job has ", opt.world_size,
                    " ranks (0..", opt.world_size - 1, ")"),
           req);
    return;
  }
  RankInfo& info = ranks[m.rank];
  if (info.state == RankState::kLeft) {
    refuse(c, ErrorCode::kRegistry,
           log::cat(describe(m.rank), "; a rank that left cannot rejoin the job (pid ", m.pid,
                    " on ", m.host, " tried)"),
           req);
    return;
  }
  // A rank that died may join again, as its next incarnation: a new process
  // (the old one's connection is gone, so a stopped process that resumed
  // cannot come back this way). Its peers keep every flow and region of the
  // old incarnation failed (clients pin incarnations).
  const bool rejoin = info.state == RankState::kDied;
  const uint32_t incarnation = rejoin ? info.incarnation + 1 : 0;
  if (info.state == RankState::kAlive) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("rank ", m.rank, " already joined (", info.host, ", pid ", info.pid,
                    "); is the same rank launched twice?"),
           req);
    return;
  }
  c.rank = m.rank;
  c.deadline = kNever;
  if (joined_address.empty() && binds_wildcard()) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(c.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      joined_address = peer_name(ss);
    }
  }
  info = RankInfo{RankState::kAlive, m.host, m.pid, "", c.id, now, incarnation};
  if (rejoin) {
    log::warn("registry: rank ", m.rank, " rejoined from ", m.host, " (pid ", m.pid, ", ", c.peer,
              ") as incarnation ", incarnation);
    waiters.rejoin_rank(m.rank);
  } else {
    log::info("registry: rank ", m.rank, " joined from ", m.host, " (pid ", m.pid, ", ", c.peer,
              ")");
  }

  send(c, MsgType::kWelcome, req, encode(welcome_message()));
  broadcast(PeerEventMsg{m.rank, PeerState::kAlive, "", m.host, m.pid, incarnation}, c.id);
}

// Every rank the registry has seen, as WELCOME lists them.
WelcomeMsg RegistryServer::Impl::welcome_message() const {
  WelcomeMsg welcome;
  welcome.heartbeat_ms = static_cast<uint32_t>(opt.heartbeat_timeout.count());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const RankInfo& ri = ranks[r];
    if (ri.state == RankState::kAbsent) continue;
    const PeerState st = ri.state == RankState::kAlive  ? PeerState::kAlive
                         : ri.state == RankState::kLeft ? PeerState::kLeft
                                                        : PeerState::kDied;
    welcome.peers.push_back(PeerEventMsg{r, st, ri.reason, ri.host, ri.pid, ri.incarnation});
  }
  return welcome;
}

void RegistryServer::Impl::on_declare(Conn& c, const Frame& f, TimePoint now) {
  DeclareMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed DECLARE message", f.header.request_id);
    return;
  }
  waiters.declare(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                         deadline_after(m.timeout_ms, now)},
                  std::move(m));
}

void RegistryServer::Impl::on_put(Conn& c, const Frame& f) {
  PutMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed PUT message", f.header.request_id);
    return;
  }
  send(c, MsgType::kOk, f.header.request_id, "");
  waiters.put(std::move(m.key), std::move(m.value));
}

void RegistryServer::Impl::on_erase(Conn& c, const Frame& f) {
  EraseMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed ERASE message", f.header.request_id);
    return;
  }
  const uint64_t n = waiters.erase(m.key, m.prefix);
  send(c, MsgType::kOk, f.header.request_id, encode(ErasedMsg{n}));
}

void RegistryServer::Impl::on_undeclare(Conn& c, const Frame& f, TimePoint now) {
  UndeclareMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed UNDECLARE message", f.header.request_id);
    return;
  }
  waiters.undeclare(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                           deadline_after(m.timeout_ms, now)},
                    m);
}

void RegistryServer::Impl::on_get(Conn& c, const Frame& f, TimePoint now) {
  GetMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed GET message", f.header.request_id);
    return;
  }
  waiters.get(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                     deadline_after(m.timeout_ms, now)},
              m);
}

void RegistryServer::Impl::on_barrier(Conn& c, const Frame& f, TimePoint now) {
  BarrierMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed BARRIER message", f.header.request_id);
    return;
  }
  waiters.barrier(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                         deadline_after(m.timeout_ms, now)},
                  std::move(m));
}

void RegistryServer::Impl::on_counters(Conn& c, const Frame& f) {
  std::string problem;
  if (metrics.report(static_cast<uint32_t>(c.rank), f.payload, &problem)) return;
  // Telemetry must not fail a job: the report is dropped, the rank stays.
  // One line per hundred, so a rank that keeps sending them cannot flood the log.
  if (++counters_rejected % 100 == 1) {
    log::warn("registry: ignored a malformed COUNTERS report from ", describe(c.rank), " (",
              f.payload.size(), " bytes): ", problem, " (", counters_rejected, " so far)");
  }
}

std::string RegistryServer::Impl::render_metrics() const {
  const TimePoint now = Clock::now();
  std::vector<RankView> views(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankInfo& info = ranks[r];
    views[r].host = info.host;
    if (info.state == RankState::kAbsent) continue;
    views[r].state = info.state == RankState::kAlive  ? "alive"
                     : info.state == RankState::kLeft ? "left"
                                                      : "died";
    views[r].heard_age_s = std::chrono::duration<double>(now - info.last_seen).count();
  }
  return metrics.render(job_label(), views);
}

void RegistryServer::Impl::on_timers(TimePoint now) {
  for (auto& [id, c] : conns) {
    if (c->dead || now < c->deadline) continue;
    if (c->closing) {
      c->dead = true;
    } else if (c->rank < 0 && !c->observer) {
      refuse(*c, ErrorCode::kProtocol,
             log::cat("no HELLO within ", opt.heartbeat_timeout.count(), " ms"), 0);
    }
  }
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    RankInfo& info = ranks[r];
    if (info.state != RankState::kAlive || now - info.last_seen < opt.heartbeat_timeout) continue;
    const uint64_t conn_id = info.conn_id;
    const std::string reason = log::cat("no heartbeat for ", opt.heartbeat_timeout.count(), " ms");
    lose_rank(r, RankState::kDied, reason);
    if (Conn* c = find_conn(conn_id)) c->dead = true;
    // The process may still exist (stopped, or hung with its control thread);
    // whoever launched it should stop it.
    if (opt.on_silent_rank) opt.on_silent_rank(r, reason);
  }

  waiters.expire(now);
}

TimePoint RegistryServer::Impl::next_timer() const {
  TimePoint next = kNever;
  for (const auto& [id, c] : conns) next = std::min(next, c->deadline);
  for (const RankInfo& info : ranks) {
    if (info.state == RankState::kAlive)
      next = std::min(next, info.last_seen + opt.heartbeat_timeout);
  }
  if (metrics_http) next = std::min(next, metrics_http->next_deadline());
  return std::min(next, waiters.next_deadline());
}

void RegistryServer::Impl::flush(Conn& c) {
  while (!c.dead && c.out_pos < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (c.closing) {
      c.dead = true;
    } else {
      drop(c, n < 0 ? log::cat("connection error: ", std::strerror(errno)) : kClosedReason);
    }
    return;
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.closing && !c.write_shut && !c.dead) {
    // Half-close: the peer reads everything we sent, then EOF.
    ::shutdown(c.fd, SHUT_WR);
    c.write_shut = true;
  }
}

void RegistryServer::Impl::reap() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (it->second->dead) {
      ::close(it->second->fd);
      it = conns.erase(it);
    } else {
      ++it;
    }
  }
}

void RegistryServer::Impl::serve() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stopping.load(std::memory_order_acquire)) {
    TimePoint now = Clock::now();
    fds.clear();
    ids.clear();
    fds.push_back(pollfd{wake_fd, POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back(pollfd{accepting ? listen_fd : -1, POLLIN, 0});
    for (const auto& [id, c] : conns) {
      const short events = static_cast<short>(POLLIN | (c->out_pos < c->out.size() ? POLLOUT : 0));
      fds.push_back(pollfd{c->fd, events, 0});
      ids.push_back(id);
    }
    const size_t metrics_at = fds.size();
    if (metrics_http) metrics_http->add_pollfds(&fds);
    TimePoint wake = std::min(next_timer(), now + kMaxPollWait);
    if (!accepting) wake = std::min(wake, accept_paused_until);
    const auto wait_ms = std::chrono::ceil<milliseconds>(std::max(wake - now, Clock::duration{0}));
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms.count()));
    if (rc < 0 && errno != EINTR) {
      log::error("registry: poll failed: ", std::strerror(errno));
      return;
    }
    now = Clock::now();
    if (rc > 0) {
      if (fds[0].revents != 0) {
        uint64_t counter;
        [[maybe_unused]] ssize_t n = ::read(wake_fd, &counter, sizeof counter);
      }
      if (fds[1].revents != 0) accept_all(now);
      for (size_t i = 0; i < ids.size(); ++i) {
        const short rev = fds[i + 2].revents;
        Conn* c = find_conn(ids[i]);
        if (rev == 0 || c == nullptr) continue;
        // A bug must cost one connection, never the registry.
        try {
          if (rev & (POLLIN | POLLHUP | POLLERR)) on_readable(*c, now);
          if (!c->dead && (rev & POLLOUT)) flush(*c);
        } catch (const std::exception& e) {
          log::error("registry: internal error on the connection from ", c->peer, ": ", e.what());
          drop(*c, log::cat("registry internal error: ", e.what()));
        }
        settle();
      }
    }
    if (metrics_http) {
      // Scrapes are served whatever else happened (rc == 0: time-outs only).
      try {
        metrics_http->on_poll(fds.data() + metrics_at, now);
      } catch (const std::exception& e) {
        log::error("registry: internal error in the metrics endpoint: ", e.what());
      }
    }
    on_timers(now);
    settle();
    for (auto& [id, c] : conns) flush(*c);
    settle();
    reap();
  }
}

RegistryServer::RegistryServer(RegistryOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  if (impl_->opt.world_size == 0) {
    throw Error(ErrorCode::kInvalidArgument, "registry: world_size must be at least 1");
  }
  if (impl_->opt.max_unauthenticated == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "registry: max_unauthenticated must be at least 1, or no rank could join");
  }
  if (impl_->opt.heartbeat_timeout.count() <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "registry: heartbeat_timeout must be positive");
  }
  impl_->bind_and_listen();
  if (impl_->opt.metrics) {
    impl_->metrics_http =
        std::make_unique<MetricsHttp>(impl_->opt.metrics_host, impl_->opt.metrics_port,
                                      [impl = impl_.get()] { return impl->render_metrics(); });
  }
}

RegistryServer::~RegistryServer() = default;

uint16_t RegistryServer::port() const { return impl_->port; }

std::string RegistryServer::address() const { return impl_->address(); }

std::string RegistryServer::metrics_address() const {
  return impl_->metrics_http ? impl_->metrics_http->address() : std::string();
}

void RegistryServer::run() {
  try {
    impl_->serve();
  } catch (const std::exception& e) {
    // Only resource exhaustion (e.g. bad_alloc) outside a connection's
    // handler gets here; the job cannot continue without its registry.
    log::error("registry: stopped by an internal error: ", e.what());
  }
  // Closing every connection tells each client at once that the registry is
  // gone, rather than after a heartbeat timeout.
  for (auto& [id, c] : impl_->conns) {
    ::close(c->fd);
  }
  impl_->conns.clear();
}

void RegistryServer::stop() {
  // Release pairs with the acquire load in serve(); the eventfd write wakes
  // a poll() that is already sleeping.
  impl_->stopping.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake_fd, &one, sizeof one);
}

}  // namespace sluice::control