// TCP settings that bound how long the registry and its clients take to notice
// a peer host or network that went away. Heart-beats (protocol.h) notice a
// peer process that stopped; these notice what heart-beats cannot see from
// the kernel's side: data that is never acknowledged (TCP_USER_TIMEOUT: a
// send that stays unacknowledged this long fails the connection) and an idle
// connection whose peer vanished (keepalive probes).
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <chrono>

namespace sluice::control {

// Sets SO_KEEPALIVE (first probe after timeout / 5, at least 1 s; then every
// second) and TCP_USER_TIMEOUT = timeout on the TCP socket `fd`. Best effort:
// a socket option the kernel refuses is left as it was.
void set_tcp_liveness(int fd, std::chrono::milliseconds timeout);

}  // namespace sluice::control
