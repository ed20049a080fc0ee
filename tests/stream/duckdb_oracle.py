#!/usr/bin/env python3
"""The independent oracle of the stream tests: computes a sluice-stream
query's windows in SQL (DuckDB) from the input the generator wrote as CSV
(sluice-stream --input-csv-dir DIR), and prints them as

    row,<window_start>,<window_end>,<key>,<value>
    late,<window_start>,<late records>

Watermarks are replayed in SQL as the engine defines them (stream/window.h):
each worker's watermark before a record is the largest event time among its
earlier records (in input order, after the query's filter) minus the lag; a
record is late for a window whose end plus the allowed lateness that
watermark has reached.
"""
import argparse
import sys

import duckdb

END_OF_TIME = 2**63 - 1

QUERIES = {
    # source columns -> (key, t, value) after the query's filter and projection
    "ysb": ("SELECT worker, seq, campaign_id AS key, event_time AS t, 0 AS v FROM src WHERE event_type = 0",
            "count(*)"),
    "ro": ("SELECT worker, seq, key, time AS t, 0 AS v FROM src", "count(*)"),
    "cm": ("SELECT worker, seq, job_id AS key, time AS t, cpu AS v FROM src", "avg(v)"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", required=True, choices=sorted(QUERIES))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--window-ms", type=int, required=True)
    ap.add_argument("--slide-ms", type=int, default=0)
    ap.add_argument("--lag", type=int, default=0)
    ap.add_argument("--allowed-lateness", type=int, default=0)
    a = ap.parse_args()
    size = a.window_ms
    step = a.slide_ms or size
    records, agg = QUERIES[a.query]
    con = duckdb.connect()
    con.execute(f"CREATE VIEW src AS SELECT * FROM read_csv('{a.dir}/input-*.csv', header=true)")
    con.execute(f"CREATE VIEW recs AS {records}")
    con.execute("""CREATE VIEW marked AS SELECT *, max(t) OVER (PARTITION BY worker ORDER BY seq
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS seen_before FROM recs""")
    if size == 0:
        con.execute(f"""CREATE VIEW assigned AS SELECT key, v, 0::BIGINT AS start,
                        {END_OF_TIME}::BIGINT AS wend, false AS late FROM marked""")
    else:
        con.execute(f"""CREATE VIEW assigned AS
            SELECT key, v, start, start + {size} AS wend,
                   (seen_before IS NOT NULL AND
                    start + {size} + {a.allowed_lateness} <= seen_before - {a.lag}) AS late
            FROM (SELECT *, unnest(range(floor(t / {step})::BIGINT * {step} - {size} + {step},
                                         floor(t / {step})::BIGINT * {step} + 1, {step})) AS start
                  FROM marked)""")
    rows = con.execute(f"""SELECT start, wend, key, {agg} FROM assigned WHERE NOT late
                           GROUP BY start, wend, key ORDER BY start, key""").fetchall()
    late = con.execute("SELECT start, count(*) FROM assigned WHERE late GROUP BY start ORDER BY start").fetchall()
    out = sys.stdout
    for start, wend, key, value in rows:
        out.write(f"row,{start},{wend},{key},{value!r}\n")
    for start, n in late:
        out.write(f"late,{start},{n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
