#include "flow/failure_state.h"

namespace sluice::detail {

std::string lost_reason(const FlowContext* ctx, uint32_t rank) {
  if (ctx->liveness == nullptr) return {};
  if (ctx->liveness->registry_lost()) {
    return "lost the connection to the job's registry, so the liveness of rank " +
           std::to_string(rank) + " cannot be known";
  }
  if (!ctx->liveness->alive(rank)) return ctx->liveness->describe(rank);
  return {};
}

uint32_t first_lost_rank(const FlowContext* ctx) {
  if (ctx->liveness == nullptr) return layout::kNoCause;
  // A death this process saw first, then one another process's abort named,
  // then a rank that left (mostly because it had seen a death first).
  uint32_t left = layout::kNoCause;
  for (const bool heard : {false, true}) {
    for (const auto* side : {&ctx->spec.sources(), &ctx->spec.targets()}) {
      for (const Endpoint& e : *side) {
        if (!heard && !ctx->liveness->alive(e.rank) && ctx->liveness->left(e.rank)) {
          if (left == layout::kNoCause) left = e.rank;
          continue;
        }
        if (heard ? ctx->liveness->heard_lost(e.rank) : !ctx->liveness->alive(e.rank))
          return e.rank;
      }
    }
  }
  return left;
}

std::string host_of(const FlowContext* ctx, uint32_t rank) {
  if (rank < ctx->hosts.size() && !ctx->hosts[rank].empty()) return " on " + ctx->hosts[rank];
  return {};
}

}  // namespace sluice::detail
