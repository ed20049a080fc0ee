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

Call<std::optional<std::string>> KvClient::get(std::string_view key, Deadline deadline) {
  using R = std::optional<std::string>;
  Call<resp::Reply> c = command({"GET", key}, deadline);
  if (!c.ok()) return failed<R>(c.status, c.error);
  Call<R> out;
  if (c.value.kind == resp::Reply::Kind::kBulk) {
    out.value = std::move(c.value.text);
  } else if (c.value.kind != resp::Reply::Kind::kNull) {
    return unexpected<R>(c.value);
  }
  return out;
}

Call<bool> KvClient::put(std::string_view key, std::string_view value, Deadline deadline) {
  Call<resp::Reply> c = command({"SET", key, value}, deadline);
  if (!c.ok()) return failed<bool>(c.status, c.error);
  if (c.value.kind != resp::Reply::Kind::kSimple) return unexpected<bool>(c.value);
  Call<bool> out;
  out.value = true;
  return out;
}

Call<bool> KvClient::del(std::string_view key, Deadline deadline) {
  Call<resp::Reply> c = command({"DEL", key}, deadline);
  if (!c.ok()) return failed<bool>(c.status, c.error);
  if (c.value.kind != resp::Reply::Kind::kInteger) return unexpected<bool>(c.value);
  Call<bool> out;
  out.value = c.value.integer > 0;
  return out;
}

Call<bool> KvClient::cas(std::string_view key, std::string_view expected, std::string_view desired,
                         Deadline deadline) {
  Call<resp::Reply> c = command({"CAS", key, expected, desired}, deadline);
  if (!c.ok()) return failed<bool>(c.status, c.error);
  if (c.value.kind != resp::Reply::Kind::kInteger) return unexpected<bool>(c.value);
  Call<bool> out;
  out.value = c.value.integer == 1;
  return out;
}

}  // namespace kv
