#include "tpcc_queries.h"

#include <chrono>
#include <memory>
#include <thread>

#include "exchange_internal.h"
#include "operators.h"
#include "tpcc.h"

namespace sluice::query {

namespace {

using namespace expr;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The schema of q3's partial groups, as its first aggregate emits them.
Schema q3_partial_schema() {
  Filter f(tpcc_order_line_schema(), lit(1));
  HashAggregate agg(f.schema(), {"ol_number"},
                    {{AggKind::kSum, col("ol_quantity"), "sum_qty"},
                     {AggKind::kSum, col("ol_amount"), "sum_amount"},
                     {AggKind::kCount, nullptr, "count_order"}});
  return agg.schema();
}

// One worker's q3 plan: its operators live as long as the worker runs.
struct Q3Plan {
  Q3Plan(QueryWorker& w, const Batch& order_line, ExchangeId shuffle, ExchangeId gather)
      : scan(order_line),
        filter(scan.schema(), gt(col("ol_delivery_d"), date(2013, 7, 1))),
        partial(filter.schema(), {"ol_number"},
                {{AggKind::kSum, col("ol_quantity"), "sum_qty"},
                 {AggKind::kSum, col("ol_amount"), "sum_amount"},
                 {AggKind::kCount, nullptr, "count_order"}}),
        merge(partial.schema(), {"ol_number"},
              {{AggKind::kSum, col("sum_qty"), "sum_qty"},
               {AggKind::kSum, col("sum_amount"), "sum_amount"},
               {AggKind::kSum, col("count_order"), "count_order"}}) {
    scan.to(&filter);
    filter.to(&partial);
    partial.to(w.sender(shuffle));
    w.receive(shuffle, &merge);
    merge.to(w.sender(gather));
    w.add_local(&scan);
    if (w.receives(gather)) {
      project = std::make_unique<Project>(
          merge.schema(),
          std::vector<Projection>{{"ol_number", col("ol_number")},
                                  {"sum_qty", col("sum_qty")},
                                  {"sum_amount", col("sum_amount")},
                                  {"avg_qty", div(col("sum_qty"), col("count_order"))},
                                  {"avg_amount", div(col("sum_amount"), col("count_order"))},
                                  {"count_order", col("count_order")}});
      sort = std::make_unique<Sort>(project->schema(),
                                    std::vector<SortKey>{{"sum_qty", true}, {"ol_number", false}});
      out = std::make_unique<Collect>(sort->schema());
      project->to(sort.get());
      sort->to(out.get());
      w.receive(gather, project.get());
    }
  }
  Scan scan;
  Filter filter;
  HashAggregate partial, merge;
  std::unique_ptr<Project> project;
  std::unique_ptr<Sort> sort;
  std::unique_ptr<Collect> out;
};

}  // namespace

bool is_tpcc_query(const std::string& q) { return q == "q3"; }

TpccResult run_tpcc(sluice::Cluster& cluster, const TpccConfig& config) {
  TpccResult result;
  if (!is_tpcc_query(config.query)) {
    result.error = "unknown query '" + config.query + "' (q3)";
    return result;
  }
  const uint32_t threads = config.runtime.threads;
  Runtime rt(cluster, config.runtime);
  const Schema partial = q3_partial_schema();
  const ExchangeId shuffle =
      rt.declare(config.name + ".groups", ExchangeKind::kShuffle, partial, {"ol_number"});
  const ExchangeId gather = rt.declare(config.name + ".result", ExchangeKind::kGather, partial);
  const std::vector<ExchangeId> ids{shuffle, gather};

  // Every worker generates its warehouses first (not part of the query time).
  const uint32_t parts = rt.world() * threads;
  std::vector<TpccTables> tables(threads);
  std::vector<double> gen(threads, 0);
  {
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const auto t0 = std::chrono::steady_clock::now();
        tables[t] = generate_tpcc(config.warehouses, rt.rank() * threads + t, parts, config.seed);
        gen[t] = since(t0);
      });
    }
    for (auto& th : pool) th.join();
  }
  cluster.barrier(config.name + ".start");

  struct PerThread {
    std::vector<ExchangeStats> stats;
    double seconds = 0;
    std::string error;
  };
  std::vector<PerThread> per(threads);
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        QueryWorker w(rt, t);
        w.on_progress = config.on_progress;
        Q3Plan plan(w, tables[t].order_line, shuffle, gather);
        const auto t0 = std::chrono::steady_clock::now();
        w.run();
        per[t].seconds = since(t0);
        for (ExchangeId x : ids) per[t].stats.push_back(w.stats(x));
        if (plan.out) result.rows = plan.out->rows();
      } catch (const std::exception& e) {
        per[t].error = e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (ExchangeId x : ids) result.exchanges.push_back({rt.exchange(x).name, {}});
  for (uint32_t t = 0; t < threads; ++t) {
    result.generate_seconds = std::max(result.generate_seconds, gen[t]);
    result.seconds = std::max(result.seconds, per[t].seconds);
    if (result.error.empty()) result.error = per[t].error;
    for (size_t i = 0; i < per[t].stats.size(); ++i) {
      ExchangeStats& s = result.exchanges[i].stats;
      s.rows_sent += per[t].stats[i].rows_sent;
      s.rows_received += per[t].stats[i].rows_received;
      s.bytes_received += per[t].stats[i].bytes_received;
    }
  }
  return result;
}

}  // namespace sluice::query
