// apps/nam/options.h: the command line of sluice-nam.
//
// Thread safety: plain values; parse_options() is reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "rsi.h"
#include "workload.h"

namespace sluice::nam {

struct Options {
  WorkloadOptions workload;
  std::string protocol = "rsi";                 // --protocol rsi|2pc
  uint32_t memory_servers = 1;                  // --memory-servers: ranks 0 .. M-1
  uint32_t clients = 1;                         // --clients: client threads per compute rank
  uint32_t versions = 2;                        // --versions per record
  uint64_t max_timestamps = uint64_t{1} << 27;  // 32 MiB of vector on memory server 0
  uint32_t recovery_timeout_ms = 2000;
  uint32_t overflow_entries = 0;  // --overflow-entries per table and memory server (RSI)
  std::string history;            // --history PREFIX: PREFIX.<client>.jsonl
  bool json = false;
  // Test builds only (SLUICE_NAM_TEST_HOOKS).
  int64_t test_kill_client = -1;
  KillPoint test_kill_at = KillPoint::kNone;
  uint64_t test_kill_on_commit = 1;
  int64_t test_kill_memory_server = -1;
  uint32_t test_kill_after_ms = 0;
};

// Parses argv; prints usage and exits(2) on a bad or unknown flag, exits(0)
// after --help.
Options parse_options(int argc, char** argv);

}  // namespace sluice::nam
