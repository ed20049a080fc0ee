// The registry: one per job. It holds membership (which ranks joined, which
// left or died), flow declarations, a key/value store for setup data (ring
// descriptors), and named barriers. It speaks the framed protocol of
// protocol.h over TCP. Every connection must authenticate with the job secret
// before anything else; garbage, oversized frames, wrong versions and wrong
// secrets get an error reply and a log line and the connection is closed; the
// registry keeps serving everyone else.
//
// Liveness: a joined rank whose connection closes without a LEAVE is "died";
// one that sent LEAVE is "left"; one that sends nothing (not even a heartbeat)
// for heartbeat_timeout is "died (no heartbeat for N ms)". Every other joined
// rank is told at once (PEER_EVENT), and pending requests that wait on the
// lost rank (declare, barrier, get of keys it would put) fail with an error
// naming it. A lost rank stays lost: a later HELLO for it (a stopped process
// that resumed) is refused; but a process that asks to join (kJoinRank) may
// take the number of a rank that left, or of an elastic job's vacancy, as
// that number's next incarnation. Every HEARTBEAT is answered with a HEARTBEAT, so
// that clients can tell a registry that stopped from one that has nothing to
// say.
//
// With RegistryOptions::metrics, the same thread also serves GET /metrics
// (control/metrics_http.h): the counters each rank sends (COUNTERS) with
// its heartbeats, in the Prometheus text format. A report it cannot read is
// logged and counted; the rank stays in the job.
//
// Thread safety: run() on one thread; stop() and port() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::control {

struct RegistryOptions {
  // Address to bind; explicit, never guessed. Default 127.0.0.1 (one host).
  std::string bind_host = "127.0.0.1";
  // 0: any free port (read it back with port()).
  uint16_t port = 0;
  // Required. Clients presenting another secret are refused.
  std::string secret;
  // Number of ranks in the job: ranks must be < world_size and unique.
  uint32_t world_size = 0;
  // An elastic job's ranks at launch (0: world_size, not elastic): ranks
  // initial_ranks..world_size-1 start as vacancies, numbers no process holds
  // and no view counts (they stand as ranks that left, incarnation 0). A
  // process whose HELLO asks to join (kJoinRank) takes the lowest vacancy
  // or rank that left, as its next incarnation, and makes a new view.
  uint32_t initial_ranks = 0;
  // A joined rank silent for this long is reported died. Default 5000 ms.
  std::chrono::milliseconds heartbeat_timeout{5000};
  // A connection whose unsent replies exceed this is treated as gone (its
  // rank died: "not reading registry messages"), so that a peer that stops
  // reading cannot make the registry hold unbounded memory. Default 64 MiB.
  size_t max_queued_bytes = size_t{64} << 20;
  // Connections that have not yet been welcomed (no valid HELLO) are capped
  // at this many; a new one beyond it closes the oldest, so a flood of idle
  // connections can neither exhaust descriptors nor lock ranks out. Each is
  // also closed if it sends no HELLO within heartbeat_timeout. Default 64.
  size_t max_unauthenticated = 64;
  // Called on the registry's thread when a joined rank is declared died for
  // silence (its process may still exist, stopped or hung), before its
  // peers are told. Must not block. `sluice run` uses it to stop such a
  // rank. Default: none.
  std::function<void(uint32_t rank, const std::string& reason)> on_silent_rank;
  // Called on the registry's thread whenever a joined rank is reported lost
  // (left, or died for any reason). Must not block. `sluice run --restarts`
  // waits for it before it starts the rank again, and does not start again
  // a rank that left (it cannot rejoin). Default: none.
  std::function<void(uint32_t rank, bool left)> on_lost_rank;
  // Called on the registry's thread whenever a rank's HELLO is accepted: it
  // joined the job (incarnation 0) or joined again after it died
  // (incarnation > 0). Must not block. `sluice run` uses it to tell when the
  // job started (every rank's first incarnation joined), which its --kill
  // and --stop times count from, and which process now is the rank (a
  // spare that took a died rank's place: `pid`). Default: none.
  std::function<void(uint32_t rank, uint32_t incarnation, uint32_t pid)> on_joined;
  // Serve the Prometheus text format over HTTP on metrics_host:metrics_port
  // (port 0: any free port): the ranks' flow counters, which they report
  // with their heartbeats, and the registry's view of the ranks
  // (control/metrics.h). Default off.
  bool metrics = false;
  std::string metrics_host = "127.0.0.1";
  uint16_t metrics_port = 0;
};

class RegistryServer {
 public:
  // Binds and listens; throws Error(kResource) naming the address on failure.
  explicit RegistryServer(RegistryOptions options);
  ~RegistryServer();
  RegistryServer(const RegistryServer&) = delete;
  RegistryServer& operator=(const RegistryServer&) = delete;

  uint16_t port() const;
  // "host:port" to hand to clients (SLUICE_REGISTRY).
  std::string address() const;
  // "host:port" of the metrics endpoint (GET /metrics); "" when it is off.
  std::string metrics_address() const;
  // Serves until stop(). Never throws on peer input.
  void run();
  // Makes run() return soon. Thread-safe, idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::control
