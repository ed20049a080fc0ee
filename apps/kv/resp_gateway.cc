#include "resp_gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <stdexcept>

#include "resp.h"

namespace kv {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string wrong_args(const std::string& name) {
  return resp::error("ERR wrong number of arguments for '" + name + "' command");
}

}  // namespace

RespGateway::RespGateway(uint16_t port) {
  // Many idle connections are a case to serve, not a crash: allow as many
  // descriptors as the hard limit does.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error(std::string("resp: socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 1024) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("resp: cannot listen on TCP port " + std::to_string(port) + ": " +
                             why);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  set_nonblocking(listen_fd_);
  // One epoll set for the listener and every connection: a round of poll()
  // asks the kernel once which sockets have input, instead of trying each
  // (a thousand idle connections cost nothing then).
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;
  if (epoll_fd_ < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    throw std::runtime_error("resp: epoll: " + why);
  }
}

RespGateway::~RespGateway() {
  for (auto& [id, c] : conns_) ::close(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

bool RespGateway::finished() const { return stopping_ && conns_.empty() && inflight_count_ == 0; }

void RespGateway::watch(uint64_t id, Conn& c) {
  // Input only from a connection we read (not one held back, closing or
  // gone: level-triggered epoll would report its waiting bytes forever);
  // output readiness only while bytes wait to be sent.
  uint32_t want = c.closing || c.gone || held(c) ? 0u : static_cast<uint32_t>(EPOLLIN);
  if (!c.out.empty() && !c.gone) want |= static_cast<uint32_t>(EPOLLOUT);
  if (want == c.watched) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.watched = want;
}

size_t RespGateway::accept_all() {
  size_t n = 0;
  while (!stopping_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;  // EAGAIN, or out of descriptors: try again next round
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = next_id_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);  // out of kernel memory for the set: as if accept had failed
      break;
    }
    Conn& c = conns_[next_id_++];
    c.fd = fd;
    c.watched = EPOLLIN;
    c.readable = true;  // (bytes may have come with the connection)
    ++stats_.connections;
    ++n;
  }
  return n;
}

void RespGateway::handle(Conn& c, std::vector<std::string>& args, Client& client, size_t index) {
  if (args.empty()) return;  // an empty inline line
  ++stats_.requests;
  c.replies.emplace_back();
  Reply& r = c.replies.back();
  auto local = [&r](std::string text) {
    r.text = std::move(text);
    r.ready = true;
  };
  const std::string name = upper(args[0]);
  auto submit = [&](Op op, const std::string& key, const std::string& value,
                    const std::string& expected) {
    Command cmd;
    cmd.op = op;
    cmd.key = key;
    cmd.value = value;
    cmd.expected = expected;
    const uint64_t seq = client.add(std::move(cmd));
    InFlight& f = inflight_[index];
    if (f.replies.empty()) f.first = seq;
    f.replies.push_back(&r);  // (seqs are consecutive: each comes from add)
    ++inflight_count_;
    ++r.waiting;
  };
  auto fits = [&](size_t from) {
    size_t bytes = 0;
    for (size_t i = from; i < args.size(); ++i) bytes += args[i].size();
    return bytes <= kMaxEntryBytes;
  };
  // (Made only when needed: every command passes through here.)
  auto too_big = [] {
    return resp::error("ERR sluice-kv takes keys and values of at most " +
                       std::to_string(kMaxEntryBytes) + " bytes in all");
  };
  if (name == "PING") {
    if (args.size() > 2) return local(wrong_args("ping"));
    return local(args.size() == 2 ? resp::bulk(args[1]) : resp::simple("PONG"));
  }
  if (name == "GET") {
    if (args.size() != 2) return local(wrong_args("get"));
    if (!fits(1)) return local(too_big());
    r.kind = Kind::kGet;
    return submit(Op::kGet, args[1], "", "");
  }
  if (name == "SET") {
    if (args.size() != 3) {
      return local(args.size() < 3 ? wrong_args("set")
                                   : resp::error("ERR syntax error (sluice-kv's SET takes no "
                                                 "options)"));
    }
    if (!fits(1)) return local(too_big());
    r.kind = Kind::kSet;
    return submit(Op::kPut, args[1], args[2], "");
  }
  if (name == "DEL" || name == "EXISTS") {
    if (args.size() < 2) return local(wrong_args(name == "DEL" ? "del" : "exists"));
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i].size() > kMaxEntryBytes) return local(too_big());
    }
    r.kind = Kind::kCount;
    for (size_t i = 1; i < args.size(); ++i)
      submit(name == "DEL" ? Op::kDelete : Op::kGet, args[i], "", "");
    return;
  }
  if (name == "CAS") {
    if (args.size() != 4) return local(wrong_args("cas"));
    if (!fits(1)) return local(too_big());
    r.kind = Kind::kCas;
    return submit(Op::kCas, args[1], args[3], args[2]);
  }
  if (name == "INFO") {
    return local(
        resp::bulk("# Server\r\nredis_version:7.0.0\r\nsluice_kv:1\r\nrole:master\r\n"
                   "# Stats\r\ntotal_connections_received:" +
                   std::to_string(stats_.connections) +
                   "\r\ntotal_commands_processed:" + std::to_string(stats_.requests) + "\r\n"));
  }
  if (name == "CONFIG" || name == "COMMAND") return local(resp::array({}));
  if (name == "SELECT") {
    return local(args.size() == 2 && args[1] == "0"
                     ? resp::simple("OK")
                     : resp::error("ERR sluice-kv has one database, 0"));
  }
  if (name == "QUIT") {
    c.closing = true;
    return local(resp::simple("OK"));
  }
  if (name == "SHUTDOWN") {
    stopping_ = true;
    return local(resp::simple("OK"));
  }
  std::string shown = args[0].substr(0, 64);
  return local(resp::error("ERR unknown command '" + shown + "'"));
}

size_t RespGateway::read(Conn& c, uint64_t id, ClientGroup& clients) {
  const size_t index = id % clients.size();
  Client& client = clients.client(index);
  if (!c.readable || c.closing || c.gone) return 0;
  // Back-pressure: a peer that sends without reading its replies is not
  // read from until they drain.
  if (held(c)) return 0;
  size_t n = 0;
  char buf[16384];
  for (;;) {
    const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
    if (got > 0) {
      c.in.append(buf, static_cast<size_t>(got));
      n += static_cast<size_t>(got);
      if (c.in.size() > 4 * resp::kMaxBulk) break;  // parse before reading more
      if (static_cast<size_t>(got) < sizeof(buf)) {
        c.readable = false;  // read dry (epoll reports it again when more comes)
        break;
      }
      continue;
    }
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.gone = true;
    c.readable = false;
    break;
  }
  size_t at = 0;
  std::vector<std::string> args;
  while (!c.closing && !stopping_) {
    size_t used = 0;
    std::string error;
    const resp::Parsed p =
        resp::parse_request(std::string_view(c.in).substr(at), &args, &used, &error);
    if (p == resp::Parsed::kIncomplete) break;
    if (p == resp::Parsed::kError) {
      ++stats_.protocol_errors;
      c.replies.emplace_back();
      c.replies.back().text = resp::error("ERR " + error);
      c.replies.back().ready = true;
      c.closing = true;
      c.in.clear();
      at = 0;
      break;
    }
    at += used;
    handle(c, args, client, index);
  }
  c.in.erase(0, at);
  return n;
}

void RespGateway::complete(ClientGroup& clients) {
  completed_seen_.resize(clients.size());
  inflight_.resize(clients.size());
  for (size_t k = 0; k < clients.size(); ++k) complete(clients.client(k), k, completed_seen_[k]);
}

void RespGateway::complete(const Client& client, size_t index, size_t& seen) {
  const auto& done = client.history();
  InFlight& f = inflight_[index];
  for (; seen < done.size(); ++seen) {
    const Completed& h = done[seen];
    if (h.cmd.seq < f.first || h.cmd.seq - f.first >= f.replies.size()) continue;
    Reply*& slot = f.replies[h.cmd.seq - f.first];
    if (slot == nullptr) continue;
    Reply& r = *slot;
    slot = nullptr;
    --inflight_count_;
    while (!f.replies.empty() && f.replies.front() == nullptr) {
      f.replies.pop_front();
      ++f.first;
    }
    --r.waiting;
    switch (r.kind) {
      case Kind::kGet:
        r.text = h.result.ok ? resp::bulk(h.result.value) : resp::null_bulk();
        break;
      case Kind::kSet:
        r.text = resp::simple("OK");
        break;
      case Kind::kCount:
        r.count += h.result.ok ? 1 : 0;
        if (r.waiting == 0) r.text = resp::integer(r.count);
        break;
      case Kind::kCas:
        r.text = resp::integer(h.result.ok ? 1 : 0);
        break;
      case Kind::kLocal:
        break;
    }
    r.ready = r.waiting == 0;
  }
}

size_t RespGateway::write(Conn& c) {
  while (!c.replies.empty() && c.replies.front().ready) {
    if (!c.gone) c.out += c.replies.front().text;
    c.replies.pop_front();
  }
  if (c.gone) {
    c.out.clear();
    return 0;
  }
  size_t n = 0;
  while (!c.out.empty() && c.writable) {
    const ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      c.out.erase(0, static_cast<size_t>(sent));
      n += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.gone = true;
    c.writable = false;  // (until epoll reports room, see watch())
    break;
  }
  return n;
}

size_t RespGateway::poll(ClientGroup& clients) {
  inflight_.resize(clients.size());
  epoll_event events[64];
  const int ready = ::epoll_wait(epoll_fd_, events, 64, 0);
  size_t work = 0;
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.u64 == UINT64_MAX) {
      work += accept_all();
      continue;
    }
    auto it = conns_.find(events[i].data.u64);
    if (it == conns_.end()) continue;
    if (events[i].events & EPOLLOUT) it->second.writable = true;
    if (events[i].events & ~EPOLLOUT) it->second.readable = true;  // input, a hang-up, an error
  }
  complete(clients);
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    work += read(c, it->first, clients);
    work += write(c);  // (a gone connection's unsent bytes are dropped here)
    // A connection is closed once nothing of it is left: no reply waiting
    // on a command in flight (its Reply lives in c.replies), nothing unsent.
    const bool drained = c.replies.empty() && c.out.empty();
    if (drained && (c.gone || c.closing || stopping_)) {
      ::close(c.fd);  // (which also takes it out of the epoll set)
      it = conns_.erase(it);
    } else {
      watch(it->first, c);
      ++it;
    }
  }
  if (stopping_ && listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  return work;
}

void RespGateway::wait(std::chrono::milliseconds timeout) {
  // (The events are picked up again by the next poll(): epoll is level-triggered.)
  epoll_event events[64];
  ::epoll_wait(epoll_fd_, events, 64, static_cast<int>(timeout.count()));
}

}  // namespace kv
