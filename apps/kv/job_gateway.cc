#include "job_gateway.h"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace kv {

bool start_gateways(sluice::Cluster& cluster, const FlowJobOptions& o, uint32_t client_ranks,
                    bool is_client, bool restarted, std::unique_ptr<RespGateway>* gateway) {
  const uint32_t rank = cluster.rank();
  std::string why;
  if (is_client) {
    GatewayOptions g = o.gateway;
    g.max_entry_bytes = o.max_entry_bytes;
    const uint32_t port = g.port == 0 ? 0 : g.port + (rank - o.replicas);
    g.port = static_cast<uint16_t>(port);
    if (!o.history.empty())
      g.history = client_ranks == 1 ? o.history : o.history + "." + std::to_string(rank);
    try {
      if (port > 65535) {
        throw std::runtime_error("--resp-port " + std::to_string(o.gateway.port) +
                                 " leaves no TCP port for client rank " + std::to_string(rank));
      }
      *gateway = std::make_unique<RespGateway>(g);
      std::fprintf(stderr, "sluice-kv: rank %u serves RESP on %s port %u (pid %d)\n", rank,
                   g.bind.c_str(), static_cast<unsigned>((*gateway)->port()),
                   static_cast<int>(::getpid()));
      std::fflush(stderr);
    } catch (const std::runtime_error& e) {
      why = "rank " + std::to_string(rank) + ": " + e.what();
    }
  }
  if (restarted) {
    if (!why.empty())
      std::fprintf(stderr, "sluice-kv: a restarted RESP gateway could not start: %s\n",
                   why.c_str());
    return why.empty();
  }
  const std::vector<std::string> all = cluster.allgather("kv-gateways", why);
  std::string failed;
  for (const std::string& w : all)
    if (!w.empty()) failed += (failed.empty() ? "" : "; ") + w;
  if (failed.empty()) return true;
  if (rank == 0 || !why.empty())
    std::fprintf(stderr, "sluice-kv: a RESP gateway could not start, so the job ends: %s\n",
                 failed.c_str());
  return false;
}

}  // namespace kv
