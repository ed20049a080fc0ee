#include "tpcc_queries.h"

#include <algorithm>
#include <memory>

#include "exchange_internal.h"
#include "operators.h"
#include "tpcc.h"

namespace sluice::query {

namespace {

using namespace expr;

// A worker's plan: its operators live as long as the worker runs; `out`
// (worker 0 of process 0 only) receives the result.
struct Plan {
  virtual ~Plan() = default;
  std::unique_ptr<Collect> out;
};

std::vector<Aggregate> q3_partials() {
  return {{AggKind::kSum, col("ol_quantity"), "sum_qty"},
          {AggKind::kSum, col("ol_amount"), "sum_amount"},
          {AggKind::kCount, nullptr, "count_order"}};
}

std::vector<ExchangeId> declare_q3(Runtime& rt, const std::string& name) {
  const Schema partial =
      HashAggregate(tpcc_order_line_schema(), {"ol_number"}, q3_partials()).schema();
  return {rt.declare(name + ".groups", ExchangeKind::kShuffle, partial, {"ol_number"}),
          rt.declare(name + ".result", ExchangeKind::kGather, partial)};
}

// q3: scan order_line, filter, partial aggregate, shuffle by ol_number,
// merge, gather; at worker 0: averages and sort.
struct Q3Plan : Plan {
  Q3Plan(QueryWorker& w, const TpccTables& t, const std::vector<ExchangeId>& x)
      : scan(t.order_line, {"ol_delivery_d", "ol_number", "ol_quantity", "ol_amount"}),
        filter(scan.schema(), gt(col("ol_delivery_d"), date(2013, 7, 1))),
        partial(filter.schema(), {"ol_number"}, q3_partials()),
        merge(partial.schema(), {"ol_number"},
              {{AggKind::kSum, col("sum_qty"), "sum_qty"},
               {AggKind::kSum, col("sum_amount"), "sum_amount"},
               {AggKind::kSum, col("count_order"), "count_order"}}) {
    scan.to(&filter);
    filter.to(&partial);
    partial.to(w.sender(x[0]));
    w.receive(x[0], &merge);
    merge.to(w.sender(x[1]));
    w.add_local(&scan);
    if (!w.receives(x[1])) return;
    project = std::make_unique<Project>(
        merge.schema(),
        std::vector<Projection>{{"ol_number", col("ol_number")},
                                {"sum_qty", col("sum_qty")},
                                {"sum_amount", col("sum_amount")},
                                {"avg_qty", mean(col("sum_qty"), col("count_order"))},
                                {"avg_amount", mean(col("sum_amount"), col("count_order"))},
                                {"count_order", col("count_order")}});
    sort = std::make_unique<Sort>(project->schema(),
                                  std::vector<SortKey>{{"sum_qty", true}, {"ol_number", false}});
    out = std::make_unique<Collect>(sort->schema());
    project->to(sort.get());
    sort->to(out.get());
    w.receive(x[1], project.get());
  }
  Scan scan;
  Filter filter;
  HashAggregate partial, merge;
  std::unique_ptr<Project> project;
  std::unique_ptr<Sort> sort;
};

// q1's stages. Every join is on (warehouse, district, order or customer),
// and each side is shuffled by that key, so matching rows meet on one worker.
Project q1_customers(const Schema& in) {
  return Project(in, {{"c_w_id", col("c_w_id")}, {"c_d_id", col("c_d_id")}, {"c_id", col("c_id")}});
}
Project q1_orders(const Schema& in) {
  return Project(in, {{"o_w_id", col("o_w_id")},
                      {"o_d_id", col("o_d_id")},
                      {"o_c_id", col("o_c_id")},
                      {"o_id", col("o_id")},
                      {"o_entry_d", col("o_entry_d")}});
}
Project q1_customer_orders(const Schema& in) {
  return Project(in, {{"co_w_id", col("o_w_id")},
                      {"co_d_id", col("o_d_id")},
                      {"co_id", col("o_id")},
                      {"co_entry_d", col("o_entry_d")}});
}
Project q1_lines(const Schema& in) {
  return Project(in, {{"ol_w_id", col("ol_w_id")},
                      {"ol_d_id", col("ol_d_id")},
                      {"ol_o_id", col("ol_o_id")},
                      {"ol_amount", col("ol_amount")}});
}
std::vector<Aggregate> q1_revenue() { return {{AggKind::kSum, col("ol_amount"), "revenue"}}; }
const std::vector<std::string> kQ1Groups = {"ol_o_id", "ol_w_id", "ol_d_id", "co_entry_d"};
const std::vector<std::string> kCustomerKey = {"c_w_id", "c_d_id", "c_id"};
const std::vector<std::string> kOrderCustomerKey = {"o_w_id", "o_d_id", "o_c_id"};
const std::vector<std::string> kCoKey = {"co_w_id", "co_d_id", "co_id"};
const std::vector<std::string> kNewOrderKey = {"no_w_id", "no_d_id", "no_o_id"};
const std::vector<std::string> kLineKey = {"ol_w_id", "ol_d_id", "ol_o_id"};

std::vector<ExchangeId> declare_q1(Runtime& rt, const std::string& name) {
  const Schema cust = q1_customers(tpcc_customer_schema()).schema();
  const Schema ord = q1_orders(tpcc_orders_schema()).schema();
  HashJoinBuild cb(cust, kCustomerKey);
  const Schema co =
      q1_customer_orders(HashJoinProbe(ord, kOrderCustomerKey, &cb).schema()).schema();
  const Schema lines = q1_lines(tpcc_order_line_schema()).schema();
  // The groups' schema: lines joined with (customer orders joined with new orders).
  HashJoinBuild nob(tpcc_new_order_schema(), kNewOrderKey);
  HashJoinProbe j1(co, kCoKey, &nob);
  HashJoinBuild b2(j1.schema(), kCoKey);
  HashJoinProbe j2(lines, kLineKey, &b2);
  const Schema groups = HashAggregate(j2.schema(), kQ1Groups, q1_revenue()).schema();
  return {rt.declare(name + ".customers", ExchangeKind::kShuffle, cust, kCustomerKey),
          rt.declare(name + ".orders", ExchangeKind::kShuffle, ord, kOrderCustomerKey),
          rt.declare(name + ".customer_orders", ExchangeKind::kShuffle, co, kCoKey),
          rt.declare(name + ".new_orders", ExchangeKind::kShuffle, tpcc_new_order_schema(),
                     kNewOrderKey),
          rt.declare(name + ".lines", ExchangeKind::kShuffle, lines, kLineKey),
          rt.declare(name + ".result", ExchangeKind::kGather, groups)};
}

// q1 (Listing 1.1's four-way join): six exchanges, all active at once.
//   customers (c_state LIKE 'A%') -> x0 by customer  \ join -> x2 by order
//   orders (o_entry_d > 2013-07-01) -> x1 by customer /
//   new_order -> x3 by order; (x2 join x3) is the build side for
//   order lines -> x4 by order; join, group, HAVING -> x5 gather; sort.
struct Q1Plan : Plan {
  Q1Plan(QueryWorker& w, const TpccTables& t, const std::vector<ExchangeId>& x)
      : cust_scan(t.customer, {"c_w_id", "c_d_id", "c_id", "c_state"}),
        cust_filter(cust_scan.schema(), starts_with(col("c_state"), "A")),
        cust_project(q1_customers(cust_filter.schema())),
        ord_scan(t.orders, {"o_w_id", "o_d_id", "o_c_id", "o_id", "o_entry_d"}),
        ord_filter(ord_scan.schema(), gt(col("o_entry_d"), date(2013, 7, 1))),
        ord_project(q1_orders(ord_filter.schema())),
        no_scan(t.new_order),
        ol_scan(t.order_line, {"ol_w_id", "ol_d_id", "ol_o_id", "ol_amount"}),
        ol_project(q1_lines(ol_scan.schema())),
        cust_build(cust_project.schema(), kCustomerKey),
        cust_probe(ord_project.schema(), kOrderCustomerKey, &cust_build),
        co_project(q1_customer_orders(cust_probe.schema())),
        no_build(tpcc_new_order_schema(), kNewOrderKey),
        no_probe(co_project.schema(), kCoKey, &no_build),
        order_build(no_probe.schema(), kCoKey),
        order_probe(ol_project.schema(), kLineKey, &order_build),
        groups(order_probe.schema(), kQ1Groups, q1_revenue()),
        having(groups.schema(), gt(col("revenue"), dec(8000000, 2))) {
    // The local scans, each into its exchange.
    cust_scan.to(&cust_filter);
    cust_filter.to(&cust_project);
    cust_project.to(w.sender(x[0]));
    ord_scan.to(&ord_filter);
    ord_filter.to(&ord_project);
    ord_project.to(w.sender(x[1]));
    no_scan.to(w.sender(x[3]));
    ol_scan.to(&ol_project);
    ol_project.to(w.sender(x[4]));
    w.add_local(&cust_scan);
    w.add_local(&ord_scan);
    w.add_local(&no_scan);
    w.add_local(&ol_scan);
    // What arrives.
    w.receive(x[0], &cust_build);
    w.receive(x[1], &cust_probe);
    cust_probe.to(&co_project);
    co_project.to(w.sender(x[2]));
    w.receive(x[3], &no_build);
    w.receive(x[2], &no_probe);
    no_probe.to(&order_build);
    w.receive(x[4], &order_probe);
    order_probe.to(&groups);
    groups.to(&having);
    having.to(w.sender(x[5]));
    if (!w.receives(x[5])) return;
    project = std::make_unique<Project>(having.schema(),
                                        std::vector<Projection>{{"ol_o_id", col("ol_o_id")},
                                                                {"ol_w_id", col("ol_w_id")},
                                                                {"ol_d_id", col("ol_d_id")},
                                                                {"revenue", col("revenue")},
                                                                {"o_entry_d", col("co_entry_d")}});
    // ORDER BY revenue DESC, o_entry_d; then the order's key, for one order of ties.
    sort = std::make_unique<Sort>(project->schema(), std::vector<SortKey>{{"revenue", true},
                                                                          {"o_entry_d", false},
                                                                          {"ol_w_id", false},
                                                                          {"ol_d_id", false},
                                                                          {"ol_o_id", false}});
    out = std::make_unique<Collect>(sort->schema());
    project->to(sort.get());
    sort->to(out.get());
    w.receive(x[5], project.get());
  }
  Scan cust_scan;
  Filter cust_filter;
  Project cust_project;
  Scan ord_scan;
  Filter ord_filter;
  Project ord_project;
  Scan no_scan;
  Scan ol_scan;
  Project ol_project;
  HashJoinBuild cust_build;
  HashJoinProbe cust_probe;
  Project co_project;
  HashJoinBuild no_build;
  HashJoinProbe no_probe;
  HashJoinBuild order_build;
  HashJoinProbe order_probe;
  HashAggregate groups;
  Filter having;
  std::unique_ptr<Project> project;
  std::unique_ptr<Sort> sort;
};

// q2 (the promo-revenue ratio over order_line x item): the items (i_id
// and whether i_data LIKE 'a%', as 0/1) are broadcast to every worker and
// joined with its local order lines; the sums are partial per worker,
// gathered and added up at worker 0. CASE WHEN promo THEN ol_amount ELSE 0
// is ol_amount * promo (exact: promo is 0 or 1).
Project q2_items(const Schema& in) {
  return Project(in, {{"i_id", col("i_id")}, {"i_promo", starts_with(col("i_data"), "a")}});
}
std::vector<Aggregate> q2_sums(const char* promo, const char* amount) {
  return {{AggKind::kSum, col(promo), "promo_amount"}, {AggKind::kSum, col(amount), "amount"}};
}
Project q2_lines(const Schema& in) {
  return Project(
      in, {{"promo", mul(col("ol_amount"), col("i_promo"))}, {"ol_amount", col("ol_amount")}});
}

std::vector<ExchangeId> declare_q2(Runtime& rt, const std::string& name) {
  const Schema items = q2_items(tpcc_item_schema()).schema();
  HashJoinBuild b(items, {"i_id"});
  const Schema lines =
      q2_lines(HashJoinProbe(tpcc_order_line_schema(), {"ol_i_id"}, &b).schema()).schema();
  const Schema partial = HashAggregate(lines, {}, q2_sums("promo", "ol_amount")).schema();
  return {rt.declare(name + ".items", ExchangeKind::kBroadcast, items),
          rt.declare(name + ".result", ExchangeKind::kGather, partial)};
}

struct Q2Plan : Plan {
  Q2Plan(QueryWorker& w, const TpccTables& t, const std::vector<ExchangeId>& x)
      : item_scan(t.item, {"i_id", "i_data"}),
        item_project(q2_items(item_scan.schema())),
        item_build(item_project.schema(), {"i_id"}),
        ol_scan(t.order_line, {"ol_delivery_d", "ol_i_id", "ol_amount"}),
        ol_filter(ol_scan.schema(), and_(ge(col("ol_delivery_d"), date(2013, 6, 1)),
                                         lt(col("ol_delivery_d"), date(2013, 8, 1)))),
        probe(ol_filter.schema(), {"ol_i_id"}, &item_build),
        amounts(q2_lines(probe.schema())),
        partial(amounts.schema(), {}, q2_sums("promo", "ol_amount")) {
    item_scan.to(&item_project);
    item_project.to(w.sender(x[0]));
    w.receive(x[0], &item_build);
    ol_scan.to(&ol_filter);
    ol_filter.to(&probe);
    probe.to(&amounts);
    amounts.to(&partial);
    partial.to(w.sender(x[1]));
    w.add_local(&item_scan);
    w.add_local(&ol_scan);
    if (!w.receives(x[1])) return;
    total = std::make_unique<HashAggregate>(partial.schema(), std::vector<std::string>{},
                                            q2_sums("promo_amount", "amount"));
    project = std::make_unique<Project>(
        total->schema(),
        std::vector<Projection>{{"promo_revenue", div(mul(dec(10000, 2), col("promo_amount")),
                                                      add(lit(1), col("amount")))}});
    out = std::make_unique<Collect>(project->schema());
    total->to(project.get());
    project->to(out.get());
    w.receive(x[1], total.get());
  }
  Scan item_scan;
  Project item_project;
  HashJoinBuild item_build;
  Scan ol_scan;
  Filter ol_filter;
  HashJoinProbe probe;
  Project amounts;
  HashAggregate partial;
  std::unique_ptr<HashAggregate> total;
  std::unique_ptr<Project> project;
};

}  // namespace

bool is_tpcc_query(const std::string& q) { return q == "q1" || q == "q2" || q == "q3"; }

TpccResult run_tpcc(sluice::Cluster& cluster, const TpccConfig& config) {
  TpccResult result;
  if (!is_tpcc_query(config.query)) {
    result.failure = sluice::JobFailure{"unknown query '" + config.query + "' (q1, q2, q3)", {}};
    return result;
  }
  const uint32_t threads = config.runtime.threads;
  Runtime rt(cluster, config.runtime);
  const bool q1 = config.query == "q1";
  const bool q2 = config.query == "q2";
  const std::vector<ExchangeId> ids = q1   ? declare_q1(rt, config.name)
                                      : q2 ? declare_q2(rt, config.name)
                                           : declare_q3(rt, config.name);

  // Every worker generates its warehouses, or reads its part of the CSV
  // files, first (not part of the query time).
  const uint32_t parts = rt.world() * threads;
  std::vector<TpccTables> tables(threads);
  const sluice::PoolReport load = sluice::run_workers(
      cluster, {threads, config.name + ".load", {}}, [&](uint32_t t, sluice::StartLine& start) {
        start.wait();
        const uint32_t part = rt.rank() * threads + t;
        tables[t] = config.input_dir.empty() ? generate_tpcc(config.warehouses, part, parts,
                                                             config.seed, config.every_amount)
                                             : read_tpcc(config.input_dir, part, parts);
      });
  result.generate_seconds = load.seconds;
  if (load.failure && load.failure->lost_peer) {
    result.failure = load.failure;
    return result;
  }
  // A rank that could not load its tables fails the query on every rank
  // (rather than leaving the others at the start barrier).
  const auto loads = cluster.allgather(config.name + ".load-errors",
                                       load.failure ? load.failure->message : std::string());
  for (size_t r = 0; r < loads.size(); ++r) {
    if (!loads[r].empty()) {
      result.failure = sluice::JobFailure{
          "rank " + std::to_string(r) + " could not load its tables: " + loads[r], {}};
      return result;
    }
  }

  std::vector<std::vector<ExchangeStats>> stats(threads);
  const sluice::PoolReport run = sluice::run_workers(
      cluster, {threads, config.name + ".start", {}}, [&](uint32_t t, sluice::StartLine& start) {
        QueryWorker w(rt, t);
        std::unique_ptr<Plan> plan;
        if (q1) {
          plan = std::make_unique<Q1Plan>(w, tables[t], ids);
        } else if (q2) {
          plan = std::make_unique<Q2Plan>(w, tables[t], ids);
        } else {
          plan = std::make_unique<Q3Plan>(w, tables[t], ids);
        }
        start.wait();
        w.run();
        for (ExchangeId x : ids) stats[t].push_back(w.stats(x));
        if (plan->out) result.rows = plan->out->rows();
      });
  result.seconds = run.seconds;
  result.failure = run.failure;
  for (ExchangeId x : ids) result.exchanges.push_back({rt.exchange(x).name, {}});
  for (uint32_t t = 0; t < threads; ++t) {
    for (size_t i = 0; i < stats[t].size(); ++i) {
      ExchangeStats& s = result.exchanges[i].stats;
      s.rows_sent += stats[t][i].rows_sent;
      s.rows_received += stats[t][i].rows_received;
      s.bytes_received += stats[t][i].bytes_received;
      s.ended_seconds = std::max(s.ended_seconds, stats[t][i].ended_seconds);
    }
  }
  return result;
}

}  // namespace sluice::query
