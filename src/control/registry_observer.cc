#include "control/registry_observer.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "control/protocol.h"

namespace sluice::control {
namespace {

int remaining_ms(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(std::min<int64_t>(left, 1 << 30), 0));
}

// A blocking socket to host:port, within the deadline (SO_SNDTIMEO covers
// the connect).
int connect_to(const std::string& host, uint16_t port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    throw Error(ErrorCode::kRegistry,
                log::cat("cannot resolve the registry host '", host, "': ", gai_strerror(rc)));
  }
  std::string last = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) continue;
    const int ms = std::max(remaining_ms(deadline), 1);
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
      fd = s;
    } else {
      last = std::strerror(errno);
      ::close(s);
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    throw Error(ErrorCode::kRegistry,
                log::cat("cannot reach the registry at ", host, ":", port, ": ", last));
  }
  return fd;
}

class Connection {
 public:
  Connection(int fd, Deadline deadline, std::string where)
      : fd_(fd), deadline_(deadline), where_(std::move(where)) {}
  ~Connection() { ::close(fd_); }

  void send(const std::string& frame) {
    for (size_t at = 0; at < frame.size();) {
      const ssize_t n = ::send(fd_, frame.data() + at, frame.size() - at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(ErrorCode::kRegistry,
                    log::cat("cannot write to the registry: ", std::strerror(errno)));
      }
      at += static_cast<size_t>(n);
    }
  }

  // The reply to request `id` (PEER_EVENTs and other frames in between are
  // skipped); an ERROR reply is thrown as the Error it carries.
  Frame reply(uint32_t id) {
    for (;;) {
      Frame f;
      ErrorCode code = ErrorCode::kProtocol;
      std::string problem;
      const FrameParser::Result r = parser_.next(&f, &code, &problem);
      if (r == FrameParser::Result::kBad) {
        throw Error(code, "the registry's answer cannot be read: " + problem);
      }
      if (r == FrameParser::Result::kFrame) {
        if (f.header.request_id != id) continue;
        if (f.header.type == static_cast<uint16_t>(MsgType::kError)) {
          ErrorMsg e;
          if (!decode(f.payload, &e)) throw Error(ErrorCode::kProtocol, "malformed ERROR reply");
          throw Error(e.code, "the registry refused: " + e.text);
        }
        return f;
      }
      pollfd p{fd_, POLLIN, 0};
      const int ms = remaining_ms(deadline_);
      if (ms == 0 || ::poll(&p, 1, ms) == 0) {
        throw Error(ErrorCode::kTimeout, "the registry at " + where_ + " did not answer in time");
      }
      char buf[16 * 1024];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(ErrorCode::kRegistry,
                    n == 0 ? std::string("the registry closed the connection")
                           : log::cat("cannot read from the registry: ", std::strerror(errno)));
      }
      parser_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  Deadline deadline_;
  std::string where_;
  // Reads ERROR frames of any version, so a registry of another version
  // can still say why it refused us.
  FrameParser parser_{/*check_version=*/false};
};

const char* state_name(PeerState s) {
  switch (s) {
    case PeerState::kAlive:
      return "alive";
    case PeerState::kLeft:
      return "left";
    case PeerState::kDied:
      return "died";
  }
  return "?";
}

}  // namespace

std::vector<ObservedRank> observe_job(const std::string& host, uint16_t port,
                                      const std::string& secret, const std::string& key_prefix,
                                      uint32_t get_timeout_ms, Deadline deadline) {
  Connection c(connect_to(host, port, deadline), deadline, log::cat(host, ":", port));
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  c.send(make_frame(MsgType::kHello, 1,
                    encode(HelloMsg{kNoRank, 0, name, static_cast<uint32_t>(::getpid()), secret})));
  const Frame w = c.reply(1);
  WelcomeMsg welcome;
  if (w.header.type != static_cast<uint16_t>(MsgType::kWelcome) || !decode(w.payload, &welcome)) {
    throw Error(ErrorCode::kProtocol,
                log::cat("the registry answered HELLO with ",
                         to_string(static_cast<MsgType>(w.header.type)), ", not WELCOME"));
  }
  std::vector<ObservedRank> out;
  uint32_t id = 2;
  for (const PeerEventMsg& p : welcome.peers) {
    // An elastic job's vacancy (left at incarnation 0, never held): nothing
    // of it to read.
    if (p.state == PeerState::kLeft && p.incarnation == 0 && p.host.empty() && p.pid == 0) {
      out.push_back(ObservedRank{p.rank, "vacant", p.reason, "", 0, ""});
      continue;
    }
    ObservedRank r{p.rank, state_name(p.state), p.reason, p.host, p.pid, ""};
    c.send(make_frame(MsgType::kGet, id,
                      encode(GetMsg{key_prefix + std::to_string(p.rank), -1, get_timeout_ms})));
    try {
      const Frame v = c.reply(id);
      ValueMsg value;
      if (v.header.type == static_cast<uint16_t>(MsgType::kValue) && decode(v.payload, &value)) {
        r.value = std::move(value.value);
      }
    } catch (const Error& e) {
      // Not published (yet): the rank is listed without it.
      if (e.code() != ErrorCode::kTimeout) throw;
    }
    ++id;
    out.push_back(std::move(r));
  }
  c.send(make_frame(MsgType::kLeave, 0, ""));
  return out;
}

}  // namespace sluice::control
