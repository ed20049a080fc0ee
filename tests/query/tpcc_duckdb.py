#!/usr/bin/env python3
"""The paper's three TPC-C queries (Listing 1.1) in DuckDB, on the CSV files
that `sluice-query tpcc-export` writes: the oracle of tests/query/tpcc_test.cc
and the peer of bench/query/sweep.py.

  tpcc_duckdb.py DIR    prints every result row as "q1 row: a,b,..."

The SQL is the paper's, with keys added to ORDER BY where the paper's leaves
ties in no particular order (q1: the order's key; q3: ol_number), and q3's
averages as avg() (CH-benCHmark's Q1) rather than sum() / count(*): DuckDB's
avg of a decimal divides the exact sum once (sum / (count * 100), in long
double), while sum(ol_amount) / count(*) makes the sum a double first and
rounds twice. sluice-query's averages are avg()'s, bit for bit.
"""
import sys

# The tables as the generator types them (apps/query/tpcc.cc).
TABLES = {
    "customer": "'c_id': 'BIGINT', 'c_d_id': 'BIGINT', 'c_w_id': 'BIGINT', 'c_last': 'VARCHAR', "
                "'c_state': 'VARCHAR', 'c_credit': 'VARCHAR', 'c_balance': 'DECIMAL(12,2)'",
    "orders": "'o_id': 'BIGINT', 'o_d_id': 'BIGINT', 'o_w_id': 'BIGINT', 'o_c_id': 'BIGINT', "
              "'o_entry_d': 'DATE', 'o_ol_cnt': 'BIGINT'",
    "new_order": "'no_o_id': 'BIGINT', 'no_d_id': 'BIGINT', 'no_w_id': 'BIGINT'",
    "item": "'i_id': 'BIGINT', 'i_im_id': 'BIGINT', 'i_name': 'VARCHAR', "
            "'i_price': 'DECIMAL(5,2)', 'i_data': 'VARCHAR'",
    "order_line": "'ol_o_id': 'BIGINT', 'ol_d_id': 'BIGINT', 'ol_w_id': 'BIGINT', "
                  "'ol_number': 'BIGINT', 'ol_i_id': 'BIGINT', 'ol_supply_w_id': 'BIGINT', "
                  "'ol_delivery_d': 'DATE', 'ol_quantity': 'BIGINT', "
                  "'ol_amount': 'DECIMAL(6,2)', 'ol_dist_info': 'VARCHAR'",
}

SQL = {
    "q1": "select ol_o_id, ol_w_id, ol_d_id, sum(ol_amount) as revenue, o_entry_d "
          "from order_line, orders, new_order, customer "
          "where c_id = o_c_id and c_w_id = o_w_id and c_d_id = o_d_id "
          "and no_w_id = o_w_id and no_d_id = o_d_id and no_o_id = o_id "
          "and ol_w_id = o_w_id and ol_d_id = o_d_id and ol_o_id = o_id "
          "and c_state like 'A%' and o_entry_d > timestamp '2013-07-01 00:00:00.000000' "
          "group by ol_o_id, ol_w_id, ol_d_id, o_entry_d "
          "having sum(ol_amount) > 80000.00 "
          "order by revenue desc, o_entry_d, ol_w_id, ol_d_id, ol_o_id",
    "q2": "select 100.00 * sum(case when i_data like 'a%' then ol_amount else 0 end) / "
          "(1+sum(ol_amount)) as promo_revenue from order_line, item where ol_i_id = i_id "
          "and ol_delivery_d >= timestamp '2013-06-01 00:00:00.000' "
          "and ol_delivery_d < timestamp '2013-08-01 00:00:00.000'",
    "q3": "select ol_number, sum(ol_quantity) as sum_qty, "
          "sum(cast(ol_amount as decimal(10,2))) as sum_amount, avg(ol_quantity) as avg_qty, "
          "avg(ol_amount) as avg_amount, count(*) as count_order "
          "from order_line where ol_delivery_d > timestamp '2013-07-01 00:00:00.000' "
          "group by ol_number order by sum(ol_quantity) desc, ol_number",
}


def load(con, directory):
    """Loads the five tables from directory/<table>.csv into memory."""
    for t, cols in TABLES.items():
        con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_csv('{directory}/{t}.csv', "
                    f"header=true, columns={{{cols}}})")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tpcc_duckdb.py DIR (the CSV files of sluice-query tpcc-export)")
    import duckdb
    con = duckdb.connect()
    load(con, sys.argv[1])
    for q in ("q1", "q2", "q3"):
        for r in con.execute(SQL[q]).fetchall():
            print(f"{q} row: " + ",".join(repr(v) if isinstance(v, float) else str(v) for v in r))


if __name__ == "__main__":
    main()
