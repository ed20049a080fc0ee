#include "control/tcp_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

namespace sluice::control {

void set_tcp_liveness(int fd, std::chrono::milliseconds timeout) {
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  // Keepalive counts in whole seconds.
  const auto fifth = std::chrono::duration_cast<std::chrono::seconds>(timeout / 5).count();
  const int idle = static_cast<int>(std::clamp<int64_t>(fifth, 1, 3600));
  const int interval = 1;
  const int count = static_cast<int>(std::clamp<int64_t>(fifth * 4, 1, 100));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  const auto ms = static_cast<unsigned>(std::clamp<int64_t>(timeout.count(), 1, INT32_MAX));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

}  // namespace sluice::control
