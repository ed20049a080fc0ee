#include "control/metrics_http.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "common/tcp_listen.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxHead = 8 * 1024;
constexpr size_t kMaxConns = 32;
constexpr milliseconds kRequestTimeout{5000};
// After the response, how long to read (and drop) what the client still
// sends before closing: closing with unread bytes would reset the
// connection and could destroy the response before the client read it.
constexpr milliseconds kCloseLinger{1000};

constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextType = "text/plain; charset=utf-8";

}  // namespace

struct MetricsHttp::Conn {
  enum class Phase { kReading, kWriting, kDraining };
  int fd = -1;
  Phase phase = Phase::kReading;
  std::string in;
  std::string out;
  size_t out_pos = 0;
  Clock::time_point deadline;
  bool dead = false;
};

MetricsHttp::MetricsHttp(const std::string& host, uint16_t port, Render render)
    : host_(host), render_(std::move(render)) {
  const detail::TcpListener l = detail::tcp_listen("metrics endpoint", host, port, 64);
  listen_fd_ = l.fd;
  port_ = l.port;
}

MetricsHttp::~MetricsHttp() {
  for (auto& [id, c] : conns_) ::close(c->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string MetricsHttp::address() const {
  if (host_.find(':') != std::string::npos) return log::cat("[", host_, "]:", port_);
  return log::cat(host_, ":", port_);
}

void MetricsHttp::add_pollfds(std::vector<pollfd>* fds) {
  fds->push_back(pollfd{listen_fd_, POLLIN, 0});
  polled_.clear();
  for (const auto& [id, c] : conns_) {
    const short events = c->phase == Conn::Phase::kWriting ? POLLOUT : POLLIN;
    fds->push_back(pollfd{c->fd, events, 0});
    polled_.push_back(id);
  }
}

MetricsHttp::Clock::time_point MetricsHttp::next_deadline() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [id, c] : conns_) next = std::min(next, c->deadline);
  return next;
}

void MetricsHttp::on_poll(const pollfd* fds, Clock::time_point now) {
  for (size_t i = 0; i < polled_.size(); ++i) {
    const short rev = fds[i + 1].revents;
    auto it = conns_.find(polled_[i]);
    if (rev == 0 || it == conns_.end()) continue;
    Conn& c = *it->second;
    if (c.phase == Conn::Phase::kWriting) {
      if (rev & (POLLOUT | POLLERR | POLLHUP)) flush(c);
    } else {
      on_readable(c, now);
    }
  }
  if (fds[0].revents != 0) accept_all(now);
  for (auto& [id, c] : conns_) {
    if (c->dead || now < c->deadline) continue;
    if (c->phase == Conn::Phase::kReading) {
      answer(*c, 408, "Request Timeout", kTextType,
             "sluice registry: no complete request within 5 s\n", false, "", now);
    } else {
      c->dead = true;  // a client that does not read its response, or never closes
    }
  }
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second->dead) {
      ::close(it->second->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void MetricsHttp::accept_all(Clock::time_point now) {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN, or out of descriptors: the connection waits in the backlog.
      return;
    }
    // conns_ is ordered by id, which grows with every accept: oldest first.
    while (conns_.size() >= kMaxConns) {
      ::close(conns_.begin()->second->fd);
      conns_.erase(conns_.begin());
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->deadline = now + kRequestTimeout;
    conns_.emplace(next_id_++, std::move(c));
  }
}

void MetricsHttp::on_readable(Conn& c, Clock::time_point now) {
  char buf[4096];
  for (int rounds = 0; rounds < 16 && !c.dead; ++rounds) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // EOF or error: nothing more will be read or answered
      c.dead = true;
      return;
    }
    if (c.phase == Conn::Phase::kDraining) continue;
    c.in.append(buf, static_cast<size_t>(n));
    // The head ends at the first empty line; bare LF line ends are accepted
    // too, as HTTP/1.1 recommends.
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) end = c.in.find("\n\n");
    if (end != std::string::npos && end <= kMaxHead) {
      respond(c, c.in.substr(0, end), now);
      return;
    }
    if (c.in.size() > kMaxHead) {
      answer(c, 400, "Bad Request", kTextType, "sluice registry: request head longer than 8 KiB\n",
             false, "", now);
      return;
    }
  }
}

void MetricsHttp::respond(Conn& c, const std::string& head_text, Clock::time_point now) {
  // Request line: METHOD SP TARGET SP HTTP/1.x
  std::string_view line(head_text);
  line = line.substr(0, line.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  const bool well_formed =
      sp1 != std::string_view::npos && sp2 != std::string_view::npos && sp1 > 0 && sp2 > sp1 + 1 &&
      line.substr(sp2 + 1).rfind("HTTP/1.", 0) == 0 && line.size() == sp2 + 1 + 8;
  if (!well_formed) {
    answer(c, 400, "Bad Request", kTextType, "sluice registry: not an HTTP/1.x request\n", false,
           "", now);
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    answer(c, 405, "Method Not Allowed", kTextType,
           "sluice registry: only GET and HEAD are served\n", false, "Allow: GET, HEAD\r\n", now);
    return;
  }
  if (path != "/metrics") {
    answer(c, 404, "Not Found", kTextType,
           "sluice registry: not found; the metrics are at /metrics\n", head_only, "", now);
    return;
  }
  answer(c, 200, "OK", kExpositionType, render_(), head_only, "", now);
}

void MetricsHttp::answer(Conn& c, int status, const char* reason, const std::string& content_type,
                         const std::string& body, bool head_only, const std::string& extra_headers,
                         Clock::time_point now) {
  c.out = log::cat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                   "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                   "Connection: close\r\n\r\n");
  if (!head_only) c.out += body;
  c.out_pos = 0;
  c.in.clear();
  c.in.shrink_to_fit();
  c.phase = Conn::Phase::kWriting;
  // A client gets as long to read its response as it had to send its request.
  c.deadline = now + kRequestTimeout;
  flush(c);
}

void MetricsHttp::flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;
    return;
  }
  // Everything sent: half-close, so the client reads the response and EOF,
  // then wait for its EOF (bounded).
  ::shutdown(c.fd, SHUT_WR);
  c.out.clear();
  c.out.shrink_to_fit();
  c.phase = Conn::Phase::kDraining;
  c.deadline = std::chrono::steady_clock::now() + kCloseLinger;
}

}  // namespace sluice::control
