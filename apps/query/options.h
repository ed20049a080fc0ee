// apps/query/options.h: the command line of sluice-query.
//
// Thread safety: plain values; parse_options() is reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exchange.h"

namespace sluice::query {

struct Options {
  std::string command;                            // "synthetic", "tpcc" or "tpcc-export"
  std::string query;                              // tpcc: q3
  uint32_t warehouses = 1;                        // --warehouses (tpcc)
  uint64_t seed = 1;                              // --seed (tpcc)
  bool every_amount = false;                      // --every-amount (tpcc, tpcc-export)
  std::string dir;                                // --dir (tpcc-export)
  std::string input;                              // --input (tpcc: CSV files instead of generating)
  uint32_t threads = 1;                           // --threads
  uint64_t rows = 1000000;                        // --rows (per process)
  std::vector<uint32_t> batch_bytes{16384};       // --batch-bytes (a comma list sweeps)
  uint32_t ring_segments = 0;                     // --ring-segments (0: the flow default)
  ExchangeImpl exchange = ExchangeImpl::kSluice;  // --exchange
  bool json = false;                              // --json
  // Test builds only (SLUICE_QUERY_TEST_HOOKS): this rank kills itself with
  // SIGKILL after one of its workers has sent this many rows.
  int64_t test_kill_rank = -1;
  uint64_t test_kill_after = 0;
};

// Parses argv; prints usage and exits(2) on a bad or unknown flag, exits(0) after --help.
Options parse_options(int argc, char** argv);

}  // namespace sluice::query
