#include "flow/failure_state.h"

#include "control/registry_client.h"

namespace sluice::detail {

std::string lost_reason(const FlowContext* ctx, uint32_t rank) {
  if (ctx->peers == nullptr) return {};
  if (ctx->peers->registry_lost()) {
    return "lost the connection to the job's registry, so the liveness of rank " +
           std::to_string(rank) + " cannot be known";
  }
  if (ctx->peers->state(rank) != control::PeerTable::kAlive) return ctx->peers->describe(rank);
  return {};
}

std::string host_of(const FlowContext* ctx, uint32_t rank) {
  if (rank < ctx->hosts.size() && !ctx->hosts[rank].empty()) return " on " + ctx->hosts[rank];
  return {};
}

}  // namespace sluice::detail
