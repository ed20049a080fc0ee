#include "kv_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

namespace kv {

namespace {

// Milliseconds left until the deadline, for poll(2) (0 once it passed).
int left_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

template <class T>
Call<T> failed(CallStatus s, std::string why) {
  Call<T> c;
  c.status = s;
  c.error = std::move(why);
  return c;
}

template <class T>
Call<T> unexpected(const resp::Reply& r) {
  return failed<T>(CallStatus::kRefused,
                   r.kind == resp::Reply::Kind::kError ? r.text : "an unexpected reply");
}

}  // namespace

const char* to_string(CallStatus s) {
  switch (s) {
    case CallStatus::kOk:
      return "ok";
    case CallStatus::kTimeout:
      return "timeout";
    case CallStatus::kRefused:
      return "refused";
    case CallStatus::kDisconnected:
      return "disconnected";
  }
  return "?";
}

KvClient::KvClient(std::string host, uint16_t port) : host_(std::move(host)), port_(port) {}

KvClient::~KvClient() { drop(); }

void KvClient::drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  in_.clear();
}

CallStatus KvClient::connect(Deadline deadline, std::string* why) {
  const std::string where = host_ + ":" + std::to_string(port_);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
  if (gai != 0) {
    *why = "cannot resolve " + where + ": " + ::gai_strerror(gai);
    return CallStatus::kDisconnected;
  }
  *why = "no address for " + where;
  bool timed_out = false;
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int n = ::poll(&p, 1, left_ms(deadline));
      socklen_t len = sizeof err;
      if (n == 0) {
        err = ETIMEDOUT;
        timed_out = true;
      } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
    if (err != 0) {
      *why = "cannot connect to " + where + ": " + std::strerror(err);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
  }
  ::freeaddrinfo(found);
  if (fd_ >= 0) return CallStatus::kOk;
  return timed_out ? CallStatus::kTimeout : CallStatus::kDisconnected;
}

Call<resp::Reply> KvClient::command(const std::vector<std::string_view>& args, Deadline deadline) {
  sent_ = false;
  if (fd_ < 0) {
    std::string why;
    const CallStatus s = connect(deadline, &why);
    if (s != CallStatus::kOk) return failed<resp::Reply>(s, why);
  }
  const std::string where = host_ + ":" + std::to_string(port_);
  const std::string out = resp::array(args);
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      sent_ = true;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      const std::string why = "lost the connection to " + where + ": " + std::strerror(errno);
      drop();
      return failed<resp::Reply>(CallStatus::kDisconnected, why);
    }
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, left_ms(deadline)) == 0) {
      drop();
      return failed<resp::Reply>(CallStatus::kTimeout,
                                 "no room to send to " + where + " before the deadline");
    }
  }
  while (true) {
    Call<resp::Reply> c;
    size_t used = 0;
    std::string error;
    const resp::Parsed p = resp::parse_reply(in_, &c.value, &used, &error);
    if (p == resp::Parsed::kRequest) {
      in_.erase(0, used);
      return c;
    }
    if (p == resp::Parsed::kError) {
      drop();
      return failed<resp::Reply>(CallStatus::kDisconnected, where + " sent garbage: " + error);
    }
    pollfd pf{fd_, POLLIN, 0};
    const int ready = ::poll(&pf, 1, left_ms(deadline));
    if (ready == 0) {
      drop();
      return failed<resp::Reply>(CallStatus::kTimeout,
                                 "no answer from " + where + " before the deadline");
    }
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      const std::string why = n == 0
                                  ? where + " closed the connection"
                                  : "lost the connection to " + where + ": " + std::strerror(errno);
      drop();
      return failed<resp::Reply>(CallStatus::kDisconnected, why);
    }
  }
}

namespace {
uint64_t steady_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

template <class T, class F>
Call<T> KvClient::call(const std::vector<std::string_view>& args, Op op, Deadline deadline,
                       F result) {
  Completed h;
  h.invoked_us = steady_us();
  Call<resp::Reply> c = command(args, deadline);
  h.completed_us = steady_us();
  Call<T> out = c.ok() ? result(c.value) : failed<T>(c.status, c.error);
  if (history_ == nullptr) return out;
  // Sent and unanswered: it may be in the log. Refused, or never sent: it is
  // not an operation of the store.
  h.unknown = !out.ok() && sent_ &&
              (out.status == CallStatus::kTimeout || out.status == CallStatus::kDisconnected);
  if (!out.ok() && !h.unknown) return out;
  h.cmd.op = op;
  h.cmd.client = client_id_;
  h.cmd.seq = ++seq_;
  h.cmd.key = args[1];
  if (op == Op::kPut) h.cmd.value = args[2];
  if (op == Op::kCas) {
    h.cmd.expected = args[2];
    h.cmd.value = args[3];
  }
  if (out.ok()) {
    if constexpr (std::is_same_v<T, bool>) {
      h.result.ok = out.value;
    } else {
      h.result.ok = out.value.has_value();
      if (out.value) h.result.value = *out.value;
    }
  }
  history_->push_back(std::move(h));
  return out;
}

Call<std::optional<std::string>> KvClient::get(std::string_view key, Deadline deadline) {
  using R = std::optional<std::string>;
  return call<R>({"GET", key}, Op::kGet, deadline, [](resp::Reply& r) {
    Call<R> out;
    if (r.kind == resp::Reply::Kind::kBulk) {
      out.value = std::move(r.text);
    } else if (r.kind != resp::Reply::Kind::kNull) {
      return unexpected<R>(r);
    }
    return out;
  });
}

Call<bool> KvClient::put(std::string_view key, std::string_view value, Deadline deadline) {
  return call<bool>({"SET", key, value}, Op::kPut, deadline, [](resp::Reply& r) {
    if (r.kind != resp::Reply::Kind::kSimple) return unexpected<bool>(r);
    Call<bool> out;
    out.value = true;
    return out;
  });
}

Call<bool> KvClient::del(std::string_view key, Deadline deadline) {
  return call<bool>({"DEL", key}, Op::kDelete, deadline, [](resp::Reply& r) {
    if (r.kind != resp::Reply::Kind::kInteger) return unexpected<bool>(r);
    Call<bool> out;
    out.value = r.integer > 0;
    return out;
  });
}

Call<bool> KvClient::cas(std::string_view key, std::string_view expected, std::string_view desired,
                         Deadline deadline) {
  return call<bool>({"CAS", key, expected, desired}, Op::kCas, deadline, [](resp::Reply& r) {
    if (r.kind != resp::Reply::Kind::kInteger) return unexpected<bool>(r);
    Call<bool> out;
    out.value = r.integer == 1;
    return out;
  });
}

}  // namespace kv
