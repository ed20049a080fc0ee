// apps/query/tpcc_queries.h: the paper's analytical queries over the TPC-C
// tables (tpcc.h), as parallel plans on the exchanges of exchange.h.
//
// q3 (the per-ol_number aggregate of Listing 1.1):
//   select ol_number, sum(ol_quantity) as sum_qty, sum(ol_amount) as sum_amount,
//          avg(ol_quantity) as avg_qty, avg(ol_amount) as avg_amount,
//          count(*) as count_order
//   from order_line where ol_delivery_d > '2013-07-01'
//   group by ol_number order by sum(ol_quantity) desc   -- ties: ol_number
// Plan: every worker scans its order lines, filters, aggregates what it has
// (partial sums and counts per ol_number), shuffles the partials by
// ol_number, merges them, and gathers the groups to worker 0 of process 0,
// which computes the averages and sorts: two exchanges, both active at once.
// The averages are the exact sums divided once (expr::mean: bit-equal to
// DuckDB's avg()).
//
// Thread safety: run_tpcc() starts and joins its own worker threads
// (sluice::run_workers).
#pragma once

#include <sluice/job.h>
#include <sluice/sluice.h>

#include <optional>
#include <string>
#include <vector>

#include "batch.h"
#include "exchange.h"

namespace sluice::query {

struct TpccConfig {
  std::string query = "q3";
  uint32_t warehouses = 1;
  uint64_t seed = 1;
  bool every_amount = false;  // generate_tpcc's every_amount
  // Non-empty: every worker reads its part of each table from
  // input_dir/<table>.csv (csv.h; as tpcc-export writes them) instead of
  // generating `warehouses` warehouses. The queries are correct on any
  // partitioning of the rows, so the byte-range parts need not follow warehouses.
  std::string input_dir;
  RuntimeOptions runtime;
  std::string name = "tpcc";  // exchange names (unique per run in one job)
};

struct TpccExchangeReport {
  std::string name;
  ExchangeStats stats;  // summed over this process's workers (ended_seconds: the latest)
};

struct TpccResult {
  Batch rows;                                 // the result (rank 0 only)
  std::vector<TpccExchangeReport> exchanges;  // per exchange of the plan
  double generate_seconds =
      0;               // generating (or reading) the tables, until the slowest worker's end
  double seconds = 0;  // the query, until the slowest worker's end
  std::optional<sluice::JobFailure> failure;  // empty: it ran; else the root cause
};

// The queries run_tpcc() knows.
bool is_tpcc_query(const std::string& q);

// This process's part of one run (collective: every process calls it).
TpccResult run_tpcc(sluice::Cluster& cluster, const TpccConfig& config);

}  // namespace sluice::query
