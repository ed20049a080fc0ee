// apps/query/options.h: the command line of sluice-query, on the job
// harness (sluice/job.h): the harness owns --threads, --seed, --json and the
// cluster flags; add_options() adds the commands and the rest.
//
// Thread safety: plain values, filled in by the harness's parse on main()'s
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exchange.h"

namespace CLI {
class App;
}

namespace sluice::query {

struct Options {
  std::string command;                            // synthetic, tpcc or tpcc-export
  std::string query;                              // tpcc: q1, q2 or q3
  uint32_t warehouses = 1;                        // --warehouses (tpcc, tpcc-export)
  bool every_amount = false;                      // --every-amount (tpcc, tpcc-export)
  std::string dir;                                // --dir (tpcc-export)
  std::string input;                              // --input (tpcc: CSV files instead of generating)
  uint64_t rows = 1000000;                        // --rows (synthetic, per process)
  std::vector<uint32_t> batch_bytes{16384};       // --batch-bytes (a comma list sweeps)
  uint32_t ring_segments = 0;                     // --ring-segments (0: the flow default)
  ExchangeImpl exchange = ExchangeImpl::kSluice;  // --exchange
};

// Adds sluice-query's commands and options to `cli` (the Job's) so that
// its parse fills `o`. A value or a combination the command cannot use
// throws sluice::UsageError from the parse (exit status 2, the message
// naming the flag).
void add_options(CLI::App& cli, Options& o);

}  // namespace sluice::query
