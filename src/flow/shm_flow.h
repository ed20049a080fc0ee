// Sources and targets over rings in shared memory (the shm transport's data
// plane). They work on rings already mapped into this process; where the
// memory comes from (a memfd region, or plain memory in tests) is the
// caller's business (see src/transport/shm/region.h and src/cluster.cc).
//
// Thread safety: each core is owned by one thread (see flow.h). Cores of one
// flow share a FlowContext, which is read-only after setup.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flow/layout.h"
#include "sluice/flow.h"

namespace sluice::control {
class PeerTable;
}

namespace sluice::detail {

// What every core of one flow in this process shares.
struct FlowContext {
  FlowSpec spec;
  // Liveness of the ranks; null in tests that run without a registry.
  const control::PeerTable* peers = nullptr;
  uint32_t spin_iterations = 4000;
  uint32_t payload_bytes = 0;  // usable payload per segment
  uint32_t ring_segments = 0;
  // Host name per rank for messages (may be empty).
  std::vector<std::string> hosts;

  // "flow 'orders' source (1,0)" and the like, for messages.
  std::string endpoint_name(bool source, uint32_t index) const;
  // "source (1,0)": the same without the flow, for the other side of a message.
  std::string peer_name(bool source, uint32_t index) const;
};

// One ring this source writes to, as mapped here.
struct OutRingRef {
  layout::RingView ring;
  layout::Doorbell* bell = nullptr;  // the target endpoint's doorbell
};

// One ring this target reads from.
struct InRingRef {
  layout::RingView ring;
};

// REQUIRES: rings[t] is the ring from `source_index` to target t, for every
// target of ctx->spec, and ctx outlives the core.
std::unique_ptr<SourceCore> make_shm_source(const FlowContext* ctx, uint32_t source_index,
                                            std::vector<OutRingRef> rings);
// REQUIRES: rings[s] is the ring from source s to `target_index`.
std::unique_ptr<TargetCore> make_shm_target(const FlowContext* ctx, uint32_t target_index,
                                            layout::Doorbell* bell, std::vector<InRingRef> rings);

// Lays out fresh rings in `base` (zeroed memory of g.total_bytes) for the
// given local targets (their indices into spec.targets) and all sources.
void init_region(std::byte* base, const layout::Geometry& g, const std::vector<uint32_t>& local_targets);

}  // namespace sluice::detail
