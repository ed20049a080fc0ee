// The registry's connections: listening and accepting, reading frames,
// sending and closing, heartbeat and HELLO timeouts, a rank's loss, and the
// serve loop. What each request does is registry_requests.cc's; the state
// both share is registry_server_impl.h.
#include "control/registry_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
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
#include "common/tcp_listen.h"
#include "control/metrics.h"
#include "control/metrics_http.h"
#include "control/protocol.h"
#include "control/registry_server_impl.h"
#include "control/registry_waiters.h"
#include "control/tcp_liveness.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace registry_impl {

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

}  // namespace registry_impl

using namespace registry_impl;

void RegistryServer::Impl::bind_and_listen() {
  const detail::TcpListener l = detail::tcp_listen("registry", opt.bind_host, opt.port, 128);
  listen_fd = l.fd;
  port = l.port;
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
      return info.vacant ? s + " is " + info.reason : s + " left the job";
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
  // lose_rank() and a spare's admission may drop further connections (their
  // PEER_EVENTs can overflow them), which queues more losses: loop until
  // none is left and no spare can take a died rank's place.
  do {
    while (!pending_losses.empty()) {
      const PendingLoss loss = std::move(pending_losses.front());
      pending_losses.erase(pending_losses.begin());
      const RankInfo& info = ranks[loss.rank];
      if (info.state != RankState::kAlive || info.conn_id != loss.conn_id) continue;
      lose_rank(loss.rank, RankState::kDied, loss.reason);
    }
  } while (place_spare());
}

bool RegistryServer::Impl::place_spare() {
  // A spare whose connection ended meanwhile is gone from the queue.
  std::erase_if(spares, [this](const Spare& s) { return waiting_conn(s.conn_id) == nullptr; });
  if (spares.empty()) return false;
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].state != RankState::kDied) continue;
    const Spare spare = std::move(spares.front());
    spares.erase(spares.begin());
    Conn* c = find_conn(spare.conn_id);
    c->spare = false;
    admit(*c, spare.hello, r, spare.request_id, Clock::now(), "a spare");
    return true;
  }
  return false;
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
  info.lost_at = Clock::now();
  const uint64_t gone_conn = info.conn_id;
  const std::string who = describe(r);
  if (state == RankState::kLeft) {
    log::info("registry: ", who);
  } else {
    log::warn("registry: ", who);
  }
  ++epoch;  // every loss or departure makes a new view
  const auto heard_ms =
      std::chrono::duration_cast<milliseconds>(Clock::now() - info.last_seen).count();
  announce_view(state == RankState::kLeft ? "left" : "died", r,
                log::cat("last heard ", heard_ms, " ms before"));
  broadcast(PeerEventMsg{r, state == RankState::kLeft ? PeerState::kLeft : PeerState::kDied, reason,
                         info.host, info.pid, info.incarnation, epoch, info.fence},
            gone_conn);
  waiters.lose_rank(r, gone_conn, who);
  // After the event, so that a member has the new view before its call fails.
  waiters.view_changed(epoch);
  if (opt.on_lost_rank) opt.on_lost_rank(r, state == RankState::kLeft);
}

void RegistryServer::Impl::announce_view(const char* cause, uint32_t rank,
                                         const std::string& detail) {
  std::vector<uint32_t> members;
  for (uint32_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].state == RankState::kAlive) members.push_back(r);
  const std::string line =
      log::cat("registry: view ", epoch, ": rank ", rank, " ", cause, " (", detail, "); members ",
               members.empty() ? "none" : rank_list_text(members));
  if (std::string_view(cause) != "left") {  // as the loss or rejoin itself is logged
    log::warn(line);
  } else {
    log::info(line);
  }
  metrics.view_changed(cause);
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
    if (!c->authenticated() && !c->closing && !c->dead) ++waiting;
  }
  // conns is ordered by id, which grows with every accept: oldest first.
  for (auto it = conns.begin(); waiting > opt.max_unauthenticated && it != conns.end(); ++it) {
    Conn& c = *it->second;
    if (c.authenticated() || c.closing || c.dead) continue;
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
        // A peer that half-closed after its last request (LEAVE) still
        // reads: what is queued for it (replies to the requests before
        // LEAVE, which came in this same read) goes out first.
        c.peer_closed = true;
        if (c.out_pos >= c.out.size()) c.dead = true;
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

std::string RegistryServer::Impl::render_metrics() const {
  const TimePoint now = Clock::now();
  std::vector<RankView> views(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankInfo& info = ranks[r];
    views[r].host = info.host;
    if (info.state == RankState::kAbsent) continue;
    if (info.vacant) {  // never heard from
      views[r].state = "vacant";
      continue;
    }
    views[r].state = info.state == RankState::kAlive  ? "alive"
                     : info.state == RankState::kLeft ? "left"
                                                      : "died";
    views[r].heard_age_s = std::chrono::duration<double>(now - info.last_seen).count();
  }
  const auto waiting = std::count_if(spares.begin(), spares.end(), [this](const Spare& s) {
    const Conn* c = find_conn(s.conn_id);
    return c != nullptr && !c->closing;
  });
  return metrics.render(job_label(), views, epoch, static_cast<uint64_t>(waiting));
}

void RegistryServer::Impl::on_timers(TimePoint now) {
  for (auto& [id, c] : conns) {
    if (c->dead || now < c->deadline) continue;
    if (c->closing) {
      c->dead = true;
    } else if (!c->authenticated()) {
      refuse(*c, ErrorCode::kProtocol,
             log::cat("no HELLO within ", opt.heartbeat_timeout.count(), " ms"), 0);
    }
  }
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    RankInfo& info = ranks[r];
    if (info.state != RankState::kAlive || now - info.last_seen < opt.heartbeat_timeout) continue;
    const uint64_t conn_id = info.conn_id;
    const std::string reason = log::cat("no heartbeat for ", opt.heartbeat_timeout.count(), " ms");
    // The process may still exist (stopped, or hung with its control
    // thread): whoever launched it should stop it. Told before the peers
    // are, so that a launcher hears of it before a survivor on the rank's
    // host fences (kills) it (control/fence.h).
    if (opt.on_silent_rank) opt.on_silent_rank(r, reason);
    lose_rank(r, RankState::kDied, reason);
    // Told why before the connection closes, so that a rank that was only
    // stopped and resumes says it was declared lost, not that the
    // registry went away (an ERROR that answers no request: id 0).
    if (Conn* c = find_conn(conn_id); c != nullptr && !c->dead) {
      send(*c, MsgType::kError, 0,
           encode(ErrorMsg{ErrorCode::kPeerLost, r,
                           log::cat("the registry declared this rank (", r, ") lost: ", reason,
                                    " (was the process stopped, or too busy to heartbeat?); the "
                                    "job went on without it")}));
      if (!c->dead) start_closing(*c, now);
    }
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
  if (c.peer_closed) c.dead = true;
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
      // A peer whose EOF was read is only written to (POLLIN would report
      // the EOF again and again).
      const short events = static_cast<short>((c->peer_closed ? 0 : POLLIN) |
                                              (c->out_pos < c->out.size() ? POLLOUT : 0));
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