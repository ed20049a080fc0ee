// A listening TCP socket, for the servers of the control plane (the
// registry, the metrics endpoint).
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::detail {

struct TcpListener {
  int fd = -1;        // non-blocking, close-on-exec; the caller closes it
  uint16_t port = 0;  // the port it listens on (the one picked, for port 0)
};

// Listens on host:port (a name or numeric address; port 0 picks a free one)
// with SO_REUSEADDR, so that a restarted server takes its port back while
// old connections sit in TIME_WAIT. Throws Error(kResource) naming `who`,
// the address and the reason when the address does not resolve or no
// address it resolves to can be bound.
TcpListener tcp_listen(const std::string& who, const std::string& host, uint16_t port, int backlog);

}  // namespace sluice::detail
