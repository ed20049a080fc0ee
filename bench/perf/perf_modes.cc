// The registry of `sluice perf` modes. A new mode adds its declaration and
// its entry in the list below (see perf_mode.h).
#include <algorithm>

#include "perf_mode.h"

namespace sluice::tool::perf {

const PerfMode& bandwidth_mode();          // perf_bandwidth.cc
const PerfMode& latency_mode();            // perf_latency.cc
const PerfMode& replicate_mode();          // perf_replicate.cc
const PerfMode& replicate_ordered_mode();  // perf_replicate.cc
const PerfMode& replicate_latency_mode();  // perf_replicate_latency.cc
const PerfMode& atomics_mode();            // perf_atomics.cc

const std::vector<const PerfMode*>& perf_modes() {
  static const std::vector<const PerfMode*> modes = {
      &bandwidth_mode(),         &latency_mode(),           &replicate_mode(),
      &replicate_ordered_mode(), &replicate_latency_mode(), &atomics_mode()};
  return modes;
}

const PerfMode* find_mode(std::string_view name) {
  for (const PerfMode* m : perf_modes())
    if (m->traits().name == name) return m;
  return nullptr;
}

std::vector<std::string> mode_names() {
  std::vector<std::string> out;
  for (const PerfMode* m : perf_modes()) out.push_back(m->traits().name);
  return out;
}

std::vector<Endpoint> source_endpoints(const Cluster& c, const WorkerArgs& a) {
  std::vector<uint32_t> ranks;
  for (uint32_t r = 0; r < a.sources; ++r) ranks.push_back(r);
  return c.ranks(ranks);
}

std::vector<Endpoint> target_endpoints(const Cluster& c, const WorkerArgs& a) {
  std::vector<uint32_t> ranks;
  for (uint32_t r = 0; r < a.targets; ++r) ranks.push_back(a.sources + r);
  return c.ranks(ranks);
}

uint32_t segment_bytes_for(uint32_t requested, uint32_t record_bytes) {
  constexpr uint32_t kDefault =
      8192;  // the flow default (FlowSpec), spelled out so records can exceed it
  return std::max(requested != 0 ? requested : kDefault, record_bytes);
}

}  // namespace sluice::tool::perf
