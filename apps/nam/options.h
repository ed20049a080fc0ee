// apps/nam/options.h: the command lines of sluice-nam (Options) and
// sluice-nam-olap (olap::OlapOptions). options.cc adds each command's
// options to its CLI11 app (the job harness's, sluice/job.h) through one
// table of the flags they share; only that file includes CLI11. The
// harness's own flags (--json, --seed, --threads of sluice-nam-olap,
// --transport, ...) are read from JobFlags after the parse.
//
// Thread safety: plain values, filled in by the parse on main()'s thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ragg.h"
#include "rrj.h"
#include "rsi.h"
#include "workload.h"

namespace CLI {
class App;
}

namespace sluice::nam {

// sluice-nam.
struct Options {
  WorkloadOptions workload;                     // --seed goes to workload.seed
  std::string protocol = "rsi";                 // --protocol rsi|2pc|both
  uint32_t memory_servers = 1;                  // --memory-servers: ranks 0 .. M-1
  uint32_t clients = 1;                         // --clients: client threads per compute rank
  uint32_t versions = 2;                        // --versions per record
  uint64_t max_timestamps = uint64_t{1} << 27;  // 32 MiB of vector on memory server 0
  uint32_t recovery_timeout_ms = 2000;
  bool no_recovery = false;       // --no-recovery: a client that dies fails the run
  uint32_t spare_clients = 0;     // --spare-clients: slots a restarted rank takes (spares.h)
  uint32_t overflow_entries = 0;  // --overflow-entries per table and memory server (RSI)
  std::string history;            // --history PREFIX: PREFIX.<client>.jsonl
  bool json = false;              // --json
  bool timeline = false;          // --timeline
};

// Adds sluice-nam's options to `app`, writing into *options, which must
// outlive the parse. The parse throws sluice::UsageError for values that do
// not fit together (e.g. --versions 1), naming the flag.
void add_options(CLI::App& app, Options* options);

namespace olap {

struct OlapOptions {
  std::string kind;  // join | agg (the first argument)
  std::vector<std::string>
      algorithms;  // join: rrj ghj ghj-bloom flow-radix; agg: rdma hierarchical
  uint32_t memory_servers = 1;
  uint32_t threads = 1;  // compute threads per compute rank (--threads, JobFlags)
  JoinConfig join;       // --seed goes to join.input.seed and agg.input.seed
  AggConfig agg;
  std::string dump;  // --dump DIR: the memory servers write their data as CSV
  bool json = false;
};

// The same for sluice-nam-olap. REQUIRES: `app` has the harness's --threads
// (kFlagThreads), which this limits to 1 .. 64.
void add_olap_options(CLI::App& app, OlapOptions* options);

}  // namespace olap

}  // namespace sluice::nam
