#include "common/tcp_listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "sluice/errors.h"

namespace sluice::detail {

TcpListener tcp_listen(const std::string& who, const std::string& host, uint16_t port,
                       int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = log::cat(host, ":", port);
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    throw Error(ErrorCode::kResource,
                log::cat(who, " cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  TcpListener l;
  std::string last_error = "no addresses";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      l.fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (l.fd < 0) {
    throw Error(ErrorCode::kResource,
                log::cat(who, " cannot listen on ", where, ": ", last_error,
                         "; choose another address or port (port 0 picks a free one)"));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&ss), &len);
  l.port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return l;
}

}  // namespace sluice::detail
