// apps/nam/olap_options.h: the command line of sluice-nam-olap.
//
// Thread safety: plain values; parse_olap_options() is reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ragg.h"
#include "rrj.h"

namespace sluice::nam::olap {

struct OlapOptions {
  std::string kind;                     // join | agg (the first argument)
  std::vector<std::string> algorithms;  // join: rrj ghj ghj-bloom; agg: rdma hierarchical
  uint32_t memory_servers = 1;
  uint32_t threads = 1;  // compute threads per compute rank
  JoinConfig join;
  AggConfig agg;
  std::string dump;  // --dump DIR: the memory servers write their data as CSV
  bool json = false;
  int64_t test_kill_memory_server = -1;  // test builds only (SLUICE_NAM_TEST_HOOKS)
  int64_t test_kill_compute_rank = -1;
};

// Parses argv; prints usage and exits(2) on a bad or unknown flag (naming
// it), exits(0) after --help.
OlapOptions parse_olap_options(int argc, char** argv);

}  // namespace sluice::nam::olap
