#include "resp_gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

#include "history.h"
#include "resp.h"

namespace kv {

namespace {

using resp::wrong_args;

constexpr size_t kIdleBufferBytes = 64 * 1024;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// GETRANGE's bytes of `s` from `start` to `end`, both included; negative
// offsets count from the end; out of range clamps; as Redis computes them.
std::string_view byte_range(std::string_view s, int64_t start, int64_t end) {
  const auto n = static_cast<int64_t>(s.size());
  if (start < 0 && end < 0 && start > end) return {};
  if (start < 0) start = std::max<int64_t>(0, n + start);
  if (end < 0) end = std::max<int64_t>(0, n + end);
  if (end >= n) end = n - 1;
  if (n == 0 || start > end) return {};
  return s.substr(static_cast<size_t>(start), static_cast<size_t>(end - start + 1));
}

bool is_loopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    return (ntohl(in.sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& in6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&in6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6) && in6.s6_addr[12] == 127;
  }
  return a.ss_family == AF_UNIX;
}

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    port = ntohs(in.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    port = ntohs(in6.sin6_port);
  }
  // (Built with append: GCC 12 warns falsely on "[" + string.)
  std::string out = "[";
  out.append(host).append("]:").append(std::to_string(port));
  return out;
}

// Compares without stopping at the first difference, so that the time a
// wrong password takes says nothing of how much of it was right.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

}  // namespace

RespGateway::RespGateway(GatewayOptions options) : options_(std::move(options)) {
  std::random_device device;
  seeds_ = uint64_t(device()) << 32 | device();
  // Many idle connections are a case to serve, not a crash: allow as many
  // descriptors as the hard limit does.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  const std::string where = options_.bind + " port " + std::to_string(options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options_.port);
  if (const int rc = ::getaddrinfo(options_.bind.c_str(), service.c_str(), &hints, &found);
      rc != 0 || found == nullptr) {
    throw std::runtime_error("resp: --resp-bind '" + options_.bind +
                             "' is not a numeric IPv4 or IPv6 address (" + ::gai_strerror(rc) +
                             ")");
  }
  listen_fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    const std::string why = std::strerror(errno);
    ::freeaddrinfo(found);
    throw std::runtime_error("resp: socket: " + why);
  }
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound =
      ::bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 && ::listen(listen_fd_, 1024) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    const int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error(
        "resp: cannot listen on " + where + ": " + std::strerror(err) +
        (err == EADDRINUSE      ? " (another process has it: pick another --resp-port)"
         : err == EADDRNOTAVAIL ? " (not an address of this host: check --resp-bind)"
                                : ""));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(addr).sin6_port
                                           : reinterpret_cast<sockaddr_in&>(addr).sin_port);
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
  if (!options_.history.empty()) {
    history_ = std::fopen(options_.history.c_str(), "w");
    if (history_ == nullptr) {
      const std::string why = std::strerror(errno);
      ::close(listen_fd_);
      ::close(epoll_fd_);
      throw std::runtime_error("resp: cannot write the history file '" + options_.history +
                               "': " + why);
    }
  }
}

RespGateway::~RespGateway() {
  if (history_) std::fclose(history_);
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
  // (Parked by a blocking command with its input buffer full: only its
  // hang-up, which unparks it.)
  if (want != 0 && c.in.size() > options_.query_buffer_limit && blocked_.count(c.id) != 0)
    want = EPOLLRDHUP;
  if (!c.out.empty() && !c.gone) want |= static_cast<uint32_t>(EPOLLOUT);
  if (want == c.watched) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.watched = want;
}

void RespGateway::refuse(int fd, const char* reply) {
  // (A best-effort write: the socket is new, its buffer empty.)
  [[maybe_unused]] const ssize_t n = ::send(fd, reply, std::strlen(reply), MSG_NOSIGNAL);
  ::close(fd);
  ++stats_.refused_clients;
}

size_t RespGateway::accept_all() {
  size_t n = 0;
  while (!stopping_) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;  // EAGAIN, or out of descriptors: try again next round
    ++n;
    if (conns_.size() >= options_.maxclients) {
      refuse(fd, "-ERR max number of clients reached\r\n");
      continue;
    }
    const bool loopback = is_loopback(peer);
    if (!loopback && options_.requirepass.empty() && options_.protected_mode) {
      log("refused a client from " + address_text(peer) +
          ": protected mode (no --requirepass) serves loopback clients only");
      refuse(fd,
             "-DENIED sluice-kv is running in protected mode because no password is set: only "
             "loopback clients are served. Set a password with --requirepass and connect with "
             "AUTH, or, if this network is trusted, start it with --protected-mode no\r\n");
      continue;
    }
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
    c.loopback = loopback;
    c.peer = address_text(peer);
    c.authenticated = options_.requirepass.empty();
    c.id = next_id_;
    c.watched = EPOLLIN;
    c.readable = true;  // (bytes may have come with the connection)
    ++stats_.connections;
  }
  return n;
}

void RespGateway::log(const std::string& what) {
  // At most one line a second, with the count of those left out: a flood
  // of hostile clients must not become a flood of log lines.
  const auto now = std::chrono::steady_clock::now();
  if (now - last_log_ < std::chrono::seconds(1)) {
    ++unlogged_;
    return;
  }
  if (unlogged_ > 0) {
    std::fprintf(stderr, "sluice-kv: resp: (%llu more such events in the last second)\n",
                 static_cast<unsigned long long>(unlogged_));
  }
  std::fprintf(stderr, "sluice-kv: resp: %s\n", what.c_str());
  std::fflush(stderr);
  last_log_ = now;
  unlogged_ = 0;
}

void RespGateway::drop(Conn& c, const std::string& why) {
  log(why);
  c.gone = true;
  // The peer learns at once (its descriptor is closed once no reply of it
  // waits on the log, which may be long: poll()).
  ::shutdown(c.fd, SHUT_RDWR);
  c.queue = Queue{};
  c.watches.clear();
  c.watched_bytes = 0;
  c.in.clear();
  c.in.shrink_to_fit();
  c.out.clear();
  c.out.shrink_to_fit();
  // (Its replies wait only to be dropped in order: the text of those ready
  // goes, and the values those being assembled hold.)
  for (Reply& r : c.replies) {
    r.counted = 0;
    if (!r.ready) {
      for (std::optional<std::string>& v : r.items) v.reset();
      continue;
    }
    r.text.clear();
    r.text.shrink_to_fit();
  }
  c.finished = 0;
}

std::string RespGateway::auth(Conn& c, const std::vector<std::string>& args) {
  if (args.size() < 2) return wrong_args("auth");
  if (args.size() > 3) return resp::error("ERR syntax error");
  const bool user_ok = args.size() == 2 || args[1] == "default";
  if (options_.requirepass.empty()) {
    // (As Redis's default user without a password: AUTH default takes any.)
    if (args.size() == 3) {
      if (user_ok) return resp::simple("OK");
      ++stats_.auth_failures;
      return resp::error("WRONGPASS invalid username-password pair or user is disabled.");
    }
    return resp::error(
        "ERR AUTH <password> called without any password configured for the default user. Are "
        "you sure your configuration is correct?");
  }
  if (!user_ok || !same_secret(args.back(), options_.requirepass)) {
    // (A connection that had passed AUTH stays authenticated, as Redis 6
    // and later keep the user a failed AUTH did not replace.)
    ++stats_.auth_failures;
    return resp::error("WRONGPASS invalid username-password pair or user is disabled.");
  }
  c.authenticated = true;
  return resp::simple("OK");
}

size_t RespGateway::read(Conn& c, uint64_t id, ClientGroup& clients) {
  const size_t index = id % clients.size();
  Client& client = clients.client(index);
  if (c.closing || c.gone) return 0;
  size_t n = 0;
  // Back-pressure: a connection with too many requests unanswered is not
  // read from until the log answers some (watch() also leaves its input
  // out of epoll meanwhile).
  if (c.readable && !held(c)) {
    char buf[16384];
    for (;;) {
      const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
      if (got > 0) {
        c.in.append(buf, static_cast<size_t>(got));
        n += static_cast<size_t>(got);
        if (c.in.size() > options_.query_buffer_limit) break;  // parse before reading more
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
  }
  // Requests read earlier and left in `in` (the parse below stopped at the
  // limit, or at a blocking command: c.unparsed) are parsed whether or not
  // the socket has more: a client that pipelined them all and now waits for
  // their replies sends nothing that would wake this connection again. (An
  // unfinished request alone waits for more bytes: not parsed again.)
  if (n == 0 && !c.unparsed) return 0;
  c.unparsed = false;
  bool unfinished = false;
  size_t at = 0;
  std::vector<std::string> args;
  // (Stops once replies pile up: what is left waits in `in` until they
  // drain; and while a blocking command parks the connection.)
  while (!c.closing && !c.gone && !stopping_ && !held(c) && blocked_.count(c.id) == 0) {
    size_t used = 0;
    std::string error;
    const resp::Parsed p = resp::parse_request(std::string_view(c.in).substr(at), &args, &used,
                                               &error, options_.max_bulk);
    if (p == resp::Parsed::kIncomplete) {
      if (c.in.size() - at > options_.query_buffer_limit) {
        ++stats_.protocol_errors;
        c.replies.emplace_back();
        c.replies.back().text = resp::error(
            "ERR Protocol error: an unfinished request of more than " +
            std::to_string(options_.query_buffer_limit) + " bytes (the client query buffer limit)");
        c.replies.back().ready = true;
        c.closing = true;
        c.in.clear();
        at = 0;
      }
      unfinished = true;
      break;
    }
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
    ++n;  // (a request handled is work, even with no byte read this round)
    const size_t before = c.replies.size();
    handle(c, args, client, index);
    if (c.replies.size() > before) {
      Reply& r = c.replies.back();
      r.conn = &c;
      if (r.ready) count_finished(r);
    }
  }
  if (c.gone) return n;  // (dropped: `in` is gone already)
  c.unparsed = !unfinished && at < c.in.size();
  c.in.erase(0, at);
  // (A client that once sent a big request keeps no big buffer idle.)
  if (c.in.empty() && c.in.capacity() > kIdleBufferBytes) c.in.shrink_to_fit();
  return n;
}

void RespGateway::complete(ClientGroup& clients) {
  // (poll() sized inflight_ for the group.)
  for (size_t k = 0; k < clients.size(); ++k) complete(clients.client(k), k);
}

void RespGateway::complete(Client& client, size_t index) {
  InFlight& f = inflight_[index];
  client.take_completed([&](const Completed& h) {
    if (history_ != nullptr && !history_failed_) {
      const std::string line = history_line(h);
      history_failed_ = std::fwrite(line.data(), 1, line.size(), history_) != line.size() ||
                        std::fputc('\n', history_) == EOF;
    }
    if (!blocked_keys_.empty()) wake(h.cmd, h.result);
    note_fullness(h);
    if (h.cmd.seq < f.first || h.cmd.seq - f.first >= f.replies.size()) return;
    Reply*& slot = f.replies[h.cmd.seq - f.first];
    if (slot == nullptr) return;
    Reply& r = *slot;
    slot = nullptr;
    --inflight_count_;
    while (!f.replies.empty() && f.replies.front() == nullptr) {
      f.replies.pop_front();
      ++f.first;
    }
    --r.waiting;
    if (r.kind == Kind::kSweep) return swept(h);
    if (r.blocked_conn != 0 && parked(r, h.result)) return;
    fill(r, h.cmd, h.result);
    r.ready = r.waiting == 0;
    if (r.ready) count_finished(r);
  });
}

void RespGateway::note_fullness(const Completed& h) {
  if (h.result.refused && h.result.value != kTooLarge) {
    full_ms_ = std::max<int64_t>(wall_clock_ms(), 1);
    return;
  }
  if (full_ms_ == 0) return;
  // A write the store ran had room; a delete, a pop, a sweep may have made
  // some.
  const bool ran = detail::denied_when_full(h.cmd.op) && !h.result.refused;
  Swept swept;
  const bool freed = h.cmd.op == Op::kSweep
                         ? parse_sweep_result(h.result.value, &swept) && !swept.keys.empty()
                         : detail::writes(h.cmd, h.result);
  if (ran || freed) full_ms_ = 0;
}

std::string RespGateway::increment_reply(const Result& result, bool floating, bool hash) {
  if (result.ok) {
    int64_t n = 0;
    parse_integer(result.value, &n);  // the store's own decimal
    return floating ? resp::bulk(result.value) : resp::integer(n);
  }
  // The store's error values (store.h, Result), in Redis's words.
  if (result.value == "overflow") return resp::error("ERR increment or decrement would overflow");
  if (result.value == "nan or infinity")
    return resp::error("ERR increment would produce NaN or Infinity");
  if (floating)
    return resp::error(hash ? "ERR hash value is not a float" : "ERR value is not a valid float");
  return resp::error(hash ? "ERR hash value is not an integer"
                          : "ERR value is not an integer or out of range");
}

void RespGateway::fill(Reply& r, const Command& cmd, const Result& result) {
  if (r.kind == Kind::kExec && r.conn != nullptr && r.conn->exec_pending) {
    // The EXEC its connection waited on is decided (its AUTH, HELLO and
    // CLIENT run in fill_exec, or not at all): the connection is read
    // again.
    r.conn->exec_pending = false;
    r.conn->unparsed = true;
  }
  // A write past maxmemory changed nothing: Redis's OOM error, whatever
  // the command (only one-write requests and transactions can be refused).
  if (result.refused) {
    r.text = result.value == kTooLarge
                 ? resp::error("ERR " + std::string(kTooLarge) + " (--max-value-bytes)")
                 : resp::oom();
    // (An EXEC that the store refused whole, as Redis's EXEC refused for
    // maxmemory: discarded, saying why.)
    if (r.kind == Kind::kExec && result.value != kTooLarge) {
      r.text = resp::error("EXECABORT Transaction discarded because of: " +
                           r.text.substr(1, r.text.size() - 3));
      r.subs.clear();
    }
    return;
  }
  // An answer longer than one reply may carry (a read of all of a big
  // list, hash, set or sorted set; a pop of as much): the store's error,
  // whatever the command.
  if (!result.ok && result.value.rfind(kLongReply, 0) == 0) {
    r.text = resp::error(result.value);
    return;
  }
  // A command on a key of the other type (store.h): Redis's WRONGTYPE,
  // but for those that answer without reading the value (SETNX and SET NX,
  // 0 or null as the key exists; MGET, null).
  if (!result.ok && result.value == kWrongType && r.kind != Kind::kFlag && r.kind != Kind::kSetIf &&
      r.kind != Kind::kArray) {
    r.text = resp::error(kWrongType);
    return;
  }
  // A transaction (EXEC, MSET, MSETNX) that did not run, with the reason.
  if (cmd.op == Op::kMulti && !result.ok && !result.value.empty()) {
    r.text = resp::error(result.value);
    return;
  }
  switch (r.kind) {
    case Kind::kGet:
      r.text = result.ok ? resp::bulk(result.value) : resp::null_reply(r.resp3);
      break;
    case Kind::kBadTime:
      r.text = result.ok ? std::move(r.error) : resp::null_reply(r.resp3);
      break;
    case Kind::kSet:
    case Kind::kCas:
      r.text = r.kind == Kind::kSet ? resp::simple("OK") : resp::integer(result.ok ? 1 : 0);
      break;
    case Kind::kCount:
      r.count += result.ok ? 1 : 0;
      if (r.waiting == 0) r.text = resp::integer(r.count);
      break;
    case Kind::kNumber:
      r.text = increment_reply(result, false, false);
      break;
    case Kind::kLength:
      r.text = resp::integer(result.ok ? static_cast<int64_t>(result.value.size()) : 0);
      break;
    case Kind::kType:
      r.text = resp::simple(result.ok ? result.value : "none");
      break;
    case Kind::kRange:
      r.text = resp::bulk(byte_range(result.value, r.range_start, r.range_end));
      break;
    case Kind::kFlag:
    case Kind::kOld:
    case Kind::kOldUnlessSet:
    case Kind::kSetIf:
      if (r.kind == Kind::kFlag) {
        r.text = resp::integer(result.ok ? 1 : 0);
      } else if (r.kind == Kind::kSetIf) {
        r.text = result.ok ? resp::simple("OK") : resp::null_reply(r.resp3);
      } else if (r.kind == Kind::kOld ? result.ok : !result.ok) {
        r.text = resp::bulk(result.value);  // the value replaced (or kept: NX GET)
      } else {
        r.text = resp::null_reply(r.resp3);
      }
      break;
    case Kind::kArray:
      if (const uint64_t at = cmd.seq - r.first_seq;
          at < r.items.size() && result.ok && count_assembled(r, result.value.size()))
        r.items[at] = result.value;
      if (r.waiting == 0) {
        r.text = resp::array_header(r.items.size());
        for (const auto& v : r.items) r.text += v ? resp::bulk(*v) : resp::null_reply(r.resp3);
        r.items.clear();
        r.items.shrink_to_fit();
      }
      break;
    case Kind::kTtl: {
      // The store answers the deadline ("-1": none); the time left is
      // counted from this command's own stamp, as the store decided.
      int64_t deadline = -1;
      if (result.ok) parse_integer(result.value, &deadline);
      if (!result.ok || deadline < 0) {
        r.text = resp::integer(result.ok ? -1 : -2);
        break;
      }
      const int64_t t = r.ttl_abs ? deadline : std::max<int64_t>(0, deadline - cmd.now_ms);
      r.text = resp::integer(r.ttl_ms ? t : (t + 500) / 1000);
      break;
    }
    case Kind::kExec:
      fill_exec(r, cmd, result);
      break;
    case Kind::kMset:
      r.text = resp::simple("OK");
      break;
    case Kind::kMsetNx:
      r.text = resp::integer(result.ok ? 1 : 0);
      break;
    case Kind::kRename:
    case Kind::kRenameNx:
      if (!result.ok && !result.value.empty()) {
        r.text = resp::error("ERR " + result.value);
      } else {
        r.text = r.kind == Kind::kRename ? resp::simple("OK") : resp::integer(result.ok ? 1 : 0);
      }
      break;
    case Kind::kWatch:
      r.text = resp::simple("OK");
      break;
    case Kind::kFloat:
      r.text = increment_reply(result, true, false);
      break;
    case Kind::kSetRange: {
      int64_t n = 0;
      r.text = result.ok && parse_integer(result.value, &n) ? resp::integer(n)
                                                            : resp::error("ERR " + result.value);
      break;
    }
    case Kind::kDbSize:
    case Kind::kKeys:
    case Kind::kScan: {
      if (!result.ok) {
        r.text = resp::error(result.value);
        break;
      }
      int64_t n = 0;
      KeysPage page;
      if (r.kind == Kind::kDbSize ? !parse_integer(result.value, &n)
                                  : !decode_keys(result.value, &page)) {
        r.text = resp::error("ERR the store answered a malformed keyspace reply");
        break;
      }
      if (r.kind == Kind::kDbSize) {
        r.text = resp::integer(n);
        break;
      }
      std::string keys = resp::array_header(page.keys.size());
      for (const std::string& k : page.keys) keys += resp::bulk(k);
      r.text = r.kind == Kind::kKeys
                   ? std::move(keys)
                   : resp::array_header(2) + resp::bulk(std::to_string(page.cursor)) + keys;
      break;
    }
    case Kind::kHashCount:
    case Kind::kHashArray:
    case Kind::kHashAll:
    case Kind::kHashKeys:
    case Kind::kHashVals:
    case Kind::kHashInt:
    case Kind::kHashFloat:
    case Kind::kHashRandom:
    case Kind::kHashRandomPairs:
      fill_hash(r, result);
      break;
    case Kind::kListArray:
    case Kind::kListOk:
    case Kind::kListPos:
    case Kind::kListPosAll:
    case Kind::kListMPop:
    case Kind::kBlockPop:
      fill_list(r, result);
      break;
    case Kind::kSetCount:
    case Kind::kSetMembers:
    case Kind::kSetArray:
    case Kind::kSetFlags:
      fill_set(r, result);
      break;
    case Kind::kZInt:
    case Kind::kZDouble:
    case Kind::kZDoubleOf:
    case Kind::kZDoubles:
    case Kind::kZRank:
    case Kind::kZArray:
    case Kind::kZMPop:
    case Kind::kZBlockPop:
      fill_zset(r, result);
      break;
    case Kind::kLocal:
    case Kind::kSweep:
    case Kind::kDeferred:
      break;
  }
}

void RespGateway::maybe_sweep(ClientGroup& clients) {
  if (sweeping_ || stopping_ || next_sweep_ms_ == 0 || clients.size() == 0) return;
  const int64_t now = wall_clock_ms();
  if (now < next_sweep_ms_ || (last_sweep_ms_ != 0 && now < last_sweep_ms_ + kSweepIntervalMs))
    return;
  Command cmd;
  cmd.op = Op::kSweep;
  cmd.now_ms = now;
  const uint64_t seq = clients.client(0).add(std::move(cmd));
  sweep_reply_ = Reply{};
  sweep_reply_.kind = Kind::kSweep;
  sweep_reply_.waiting = 1;
  sweep_reply_.first_seq = seq;
  InFlight& f = inflight_[0];
  if (f.replies.empty()) f.first = seq;
  f.replies.push_back(&sweep_reply_);
  ++inflight_count_;
  sweeping_ = true;
  next_sweep_ms_ = 0;
  last_sweep_ms_ = now;
}

void RespGateway::swept(const Completed& h) {
  sweeping_ = false;
  ++stats_.sweeps;
  Swept s;
  if (!parse_sweep_result(h.result.value, &s)) return;
  stats_.expired_keys += s.keys.size();
  if (s.next_deadline_ms == 0) return;
  expect_deadline(s.next_deadline_ms);
  // More had expired than one sweep takes: the next goes at once.
  if (s.next_deadline_ms <= h.cmd.now_ms) last_sweep_ms_ = 0;
}

bool RespGateway::finish_history(std::string* why) {
  if (history_ == nullptr) return true;
  const bool ok = !history_failed_ && std::fflush(history_) == 0;
  if (!ok) *why = "cannot write the history file '" + options_.history + "'";
  return ok;
}

void RespGateway::evict() {
  if (options_.maxmemory_clients == 0) return;
  while (buffered_ > options_.maxmemory_clients) {
    Conn* biggest = nullptr;
    for (auto& [id, c] : conns_)
      if (!c.gone && (biggest == nullptr || buffered(c) > buffered(*biggest))) biggest = &c;
    if (biggest == nullptr || buffered(*biggest) == 0) return;
    ++stats_.evicted;
    drop(*biggest, "closed the client with the most buffered (" +
                       std::to_string(biggest->in.size()) + " bytes of requests, " +
                       std::to_string(biggest->out.size() + biggest->finished) + " of replies, " +
                       std::to_string(biggest->queue.bytes + biggest->queue.answered +
                                      biggest->watched_bytes) +
                       " of MULTI and WATCH): all clients' buffers took more than "
                       "--maxmemory-clients " +
                       std::to_string(options_.maxmemory_clients));
    account(*biggest);
  }
}

size_t RespGateway::write(Conn& c) {
  while (!c.replies.empty() && c.replies.front().ready) {
    c.finished -= c.replies.front().counted;
    if (!c.gone) c.out += c.replies.front().text;
    c.replies.pop_front();
  }
  // (Replies ready behind one that is not are unsent replies too.)
  if (!c.gone && c.out.size() + c.finished > options_.output_buffer_limit) {
    ++stats_.evicted;
    drop(c, "closed a client whose unsent replies passed --client-output-buffer-limit " +
                std::to_string(options_.output_buffer_limit));
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
      if (c.out.empty() && c.out.capacity() > kIdleBufferBytes) c.out.shrink_to_fit();
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
  maybe_sweep(clients);
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
  work += retry_blocked(clients);
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = it->second;
    work += read(c, it->first, clients);
    work += write(c);  // (a gone connection's unsent bytes are dropped here)
    account(c);
    // (At once, not after the round: one round may read every client.)
    if (options_.maxmemory_clients != 0 && buffered_ > options_.maxmemory_clients) evict();
    // A connection is closed once nothing of it is left: no reply waiting
    // on a command in flight (its Reply lives in c.replies), nothing unsent.
    const bool drained = c.replies.empty() && c.out.empty();
    if (drained && (c.gone || c.closing || stopping_)) {
      ::close(c.fd);  // (which also takes it out of the epoll set)
      buffered_ -= c.accounted;
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
