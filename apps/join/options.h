// apps/join/options.h: the command line shared by sluice-join and the two
// baselines (sluice-join-single, sluice-join-mpi), so that all three read
// the same flags and generate the same data.
//
// Thread safety: plain values; parse() is reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "data.h"
#include "distributed_join.h"

namespace sluice::join {

enum class Program : uint8_t { kJoin, kSingle, kMpi };

struct Options {
  DataSpec data;
  Algorithm algorithm = Algorithm::kRadix;  // --algorithm
  uint32_t threads = 1;                     // --threads
  uint32_t segment_bytes = 0;               // --segment-bytes (0: flow default)
  uint32_t ring_segments = 0;               // --ring-segments (0: flow default)
  bool verify = false;                      // --verify
  bool json = false;                        // --json
  uint32_t repeat = 1;                      // --repeat (single-thread baseline)
  std::string method = "both";  // --method (single-thread baseline): hash, radix or both
  std::string save_r, save_s;   // --save-r / --save-s patterns
  uint32_t file_ranks = 1;      // --ranks (single-thread baseline): per-rank files to read
  // Test builds of sluice-join only (SLUICE_JOIN_TEST_HOOKS): rank that
  // kills itself with SIGKILL after pushing this many tuples.
  int64_t test_kill_rank = -1;
  uint64_t test_kill_after = 0;
};

// Parses argv for `program`; prints usage and exits(2) on a bad or unknown
// flag, exits(0) after --help.
Options parse_options(int argc, char** argv, Program program);

}  // namespace sluice::join
