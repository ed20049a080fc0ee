// apps/query/tpcc.h: a deterministic TPC-C population (the tables the
// paper's analytical queries read), partitioned across workers by warehouse.
//
// Follows the population rules of TPC-C clause 4.3.3.1 for the five tables
// the queries use, per warehouse: 10 districts; per district 3000
// customers and 3000 orders (o_c_id a permutation of the customers, 5..15
// lines each); new_order rows for orders 2101..3000; order lines with
// ol_i_id uniform in 1..100000, ol_quantity 5, ol_amount 0.00 for orders
// below 2101 and uniform 0.01..9999.99 above, ol_delivery_d = o_entry_d for
// delivered orders (< 2101) and NULL (kNullDate) for the rest; 100000 items
// (i_price 1.00..100.00, i_data 26..50 characters, 10% with "ORIGINAL").
// One deviation: TPC-C loads every order "now"; here o_entry_d is spread
// uniformly over 2013 (the year the paper's date filters look at), so that
// those filters select a part of the table. NURand's C is fixed (123).
//
// Every row is drawn from a random stream keyed by the seed and the row's
// own key, so a table does not depend on how it is partitioned: worker k
// of K gets the warehouses w with (w-1) mod K == k (and the items i with
// (i-1) mod K == k), and all K parts together are the single-process table.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "batch.h"

namespace sluice::query {

struct TpccTables {
  Batch customer, orders, new_order, order_line, item;
};

Schema tpcc_customer_schema();
Schema tpcc_orders_schema();
Schema tpcc_new_order_schema();
Schema tpcc_order_line_schema();
Schema tpcc_item_schema();

// Worker `part`'s share of a database of `warehouses` warehouses, among
// `parts` workers. every_amount: delivered order lines get an amount too
// (0.01..9999.99) instead of the population rules' 0.00, so that the
// queries that read only delivered lines (q2, q3) sum real amounts.
TpccTables generate_tpcc(uint32_t warehouses, uint32_t part, uint32_t parts, uint64_t seed = 1,
                         bool every_amount = false);

// Part `part` of `parts` of each table of dir/<table>.csv (customer,
// orders, new_order, order_line, item; the columns of the schemas above, as
// write_tpcc_csv writes them), split by byte ranges (csv.h). Throws CsvError.
TpccTables read_tpcc(const std::string& dir, uint32_t part, uint32_t parts);

// Writes the tables as dir/<table>.csv (dir is created); returns the files
// written with their row counts. Throws CsvError.
std::vector<std::pair<std::string, size_t>> write_tpcc_csv(const std::string& dir,
                                                           const TpccTables& tables);

}  // namespace sluice::query
