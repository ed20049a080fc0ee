// apps/query/synthetic.h: the paper's two-shuffle benchmark on the query engine.
//
// Every worker generates its share of its process's `rows` integers
// (process p: p*rows .. p*rows+rows-1), shuffles them by value, applies
// n := n*3/2 to every row it receives, shuffles again by the new value, and
// counts what arrives with an order-independent checksum (the sum of
// sluice::hash64(n), mod 2^64). reference() computes the same in one
// process without exchanges.
//
// Thread safety: run_synthetic() starts and joins its own worker threads
// (sluice::run_workers).
#pragma once

#include <sluice/job.h>
#include <sluice/sluice.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "exchange.h"

namespace sluice::query {

struct SyntheticResult {
  uint64_t count = 0, checksum = 0;
  uint64_t rows_shuffled_1 = 0, rows_shuffled_2 = 0;  // rows received by the two exchanges
  uint64_t bytes_moved = 0;                           // record bytes received by both
  double seconds = 0;  // from the common start of every worker to this process's last one's end
  std::optional<sluice::JobFailure> failure;  // empty: it ran; else the root cause
  friend bool operator==(const SyntheticResult& a, const SyntheticResult& b) {
    return a.count == b.count && a.checksum == b.checksum;
  }
};

struct SyntheticConfig {
  uint64_t rows = 1000000;  // integers generated per process
  RuntimeOptions runtime;
  std::string name = "synthetic";  // exchange names (unique per run in one job)
  // Called once on this process when its workers have started together
  // (the command prints a line there, which `sluice run --faults-after` can
  // wait for); may be empty.
  std::function<void()> on_start;
};

// This process's part of one run (collective: every process calls it).
SyntheticResult run_synthetic(sluice::Cluster& cluster, const SyntheticConfig& config);

// The whole job's count and checksum, computed in one process.
SyntheticResult synthetic_reference(uint64_t rows, uint32_t processes);

}  // namespace sluice::query
