// apps/kv/flow_epochs.cc: see flow_epochs.h.
#include "flow_epochs.h"

#include <algorithm>

namespace kv {

std::string epoch_suffix(uint32_t world, const std::vector<uint32_t>& live) {
  std::string out;
  for (uint32_t r = 0, i = 0; r < world; ++r) {
    if (i < live.size() && live[i] == r) {
      ++i;
    } else {
      out += (out.empty() ? "-without-" : "-") + std::to_string(r);
    }
  }
  return out;
}

uint32_t epoch_session(const std::vector<uint32_t>& live, const std::vector<uint32_t>& inc) {
  uint32_t n = 1;
  for (uint32_t r = 0; r < inc.size(); ++r)
    n += 2 * inc[r] + (std::binary_search(live.begin(), live.end(), r) ? 0 : 1);
  return n;
}

std::vector<uint32_t> lost_ranks(uint32_t world, const std::vector<uint32_t>& live,
                                 uint32_t below) {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < world && r < below; ++r)
    if (!std::binary_search(live.begin(), live.end(), r)) out.push_back(r);
  return out;
}

uint32_t present_replicas(const std::vector<uint32_t>& live, uint32_t replicas) {
  uint32_t mask = 0;
  for (uint32_t r : live)
    if (r < replicas) mask |= 1u << r;
  return mask;
}

std::string ranks_text(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (uint32_t r : ranks) {
    out.push_back(' ');
    out.append(std::to_string(r));
  }
  return out;
}

}  // namespace kv
