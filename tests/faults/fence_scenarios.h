// The fault worker's fencing scenarios (docs/architecture.md, "Fencing"):
// a rank stopped from outside, declared lost for its silence and resumed
// once the survivors are in the view without it must land nothing in
// their memory (a region) and have nothing delivered (a flow).
// `mark`: the worker's "AT rank R record K" line, where the test's script
// stops rank 2.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>

namespace sluice::testing {

// Ranks 1.. write into their words of rank 0's region "fence".
int region_fence(Cluster& c, uint64_t k, void (*mark)(const Cluster&, uint64_t));
// Ranks 1.. push stamped records into a flow to rank 0 (ordered: through
// the flow's sequencer on rank 0 too).
int flow_fence(Cluster& c, uint64_t k, bool ordered, void (*mark)(const Cluster&, uint64_t));

}  // namespace sluice::testing
