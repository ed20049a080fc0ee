#!/usr/bin/env python3
"""The independent oracle of the stream tests: computes a sluice-stream
query's windows in SQL (DuckDB) from the input the generator wrote as CSV
(sluice-stream --input-csv-dir DIR), and prints them as

    row,<window_start>,<window_end>,<key>,<value>[,<more value fields>]
    late,<window_start>,<late records>
    lrec,<window_start>,<event time>,<key>     (one per late record and window)

Watermarks are replayed in SQL as the engine defines them (stream/window.h):
each worker's watermark before a record is the largest event time among its
earlier records (in input order, after the query's filter) minus the lag; a
record is late for a window whose end plus the allowed lateness that
watermark has reached. In session windows (q11, nb11) a record is late if it
lies more than the allowed lateness behind that watermark (counted per
gap-sized span of event time), and a key's sessions are found with LAG: a
new session starts where a record follows the previous one by a gap or more.
"""
import argparse
import sys

import duckdb

END_OF_TIME = 2**63 - 1

# The records after the query's filter and projection: worker, seq, key, t
# and what the result needs.
RECORDS = {
    "ysb": "SELECT worker, seq, campaign_id AS key, event_time AS t, 0 AS v FROM src WHERE event_type = 0",
    "ro": "SELECT worker, seq, key, time AS t, 0 AS v FROM src",
    "cm": "SELECT worker, seq, job_id AS key, time AS t, cpu AS v FROM src",
    "nb7": "SELECT worker, seq, auction, bidder, price, time AS t FROM src",
    "q11": "SELECT worker, seq, bidder AS key, time AS t FROM src",
    "nb8": "SELECT worker, seq, kind, id, ref, price, time AS t, CASE WHEN kind = 0 THEN id ELSE ref END AS key FROM src",
    "nb11": "SELECT worker, seq, kind, id, ref, price, time AS t, CASE WHEN kind = 0 THEN id ELSE ref END AS key FROM src",
}
AGGREGATES = {"ysb": "count(*)", "ro": "count(*)", "cm": "avg(v)"}
SESSIONS = {"q11", "nb11"}


def results(con, query, size, gap):
    if query in AGGREGATES:
        return con.execute(f"""SELECT start, wend, key, {AGGREGATES[query]} FROM assigned WHERE NOT late
                               GROUP BY start, wend, key ORDER BY start, key""").fetchall()
    if query == "nb7":
        # The key is the window's index (nexmark.h): one maximum per window.
        return con.execute(f"""WITH ok AS (SELECT * FROM assigned WHERE NOT late),
                                    mx AS (SELECT start, max(price) AS m FROM ok GROUP BY start)
                               SELECT ok.start, ok.wend, ok.start // {size}, auction, bidder, price, t
                               FROM ok JOIN mx ON ok.start = mx.start AND ok.price = mx.m""").fetchall()
    if query == "nb8":
        return con.execute("""WITH ok AS (SELECT * FROM assigned WHERE NOT late)
                              SELECT p.start, p.wend, p.id, p.id, a.id, a.price, p.t, a.t
                              FROM ok p JOIN ok a ON p.kind = 0 AND a.kind = 1 AND p.start = a.start
                                                 AND p.id = a.ref""").fetchall()
    con.execute(f"""CREATE VIEW breaks AS SELECT *, CASE WHEN t - lag(t) OVER (PARTITION BY key ORDER BY t)
                    < {gap} THEN 0 ELSE 1 END AS brk FROM assigned WHERE NOT late""")
    # Records of a key at the same time are peers: in `breaks` only the first
    # of them (in an order SQL leaves open, and DuckDB's threads vary) can be
    # a break. RANGE sums over every peer, so they all get the same session;
    # ROWS would give peers ordered before that break the previous session
    # (a flaky extra row, e.g. 8 bids at t = 0 as a session of their own).
    con.execute("""CREATE VIEW sess AS SELECT *, sum(brk) OVER (PARTITION BY key ORDER BY t
                   RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM breaks""")
    con.execute(f"""CREATE VIEW spans AS SELECT key, sid, min(t) AS start, max(t) + {gap} AS wend, count(*) AS n
                    FROM sess GROUP BY key, sid""")
    if query == "q11":
        return con.execute("SELECT start, wend, key, n FROM spans").fetchall()
    return con.execute("""SELECT s.start, s.wend, p.key, p.id, b.id, b.price, p.t, b.t
                          FROM sess p JOIN sess b ON p.key = b.key AND p.sid = b.sid AND p.kind = 0 AND b.kind = 2
                          JOIN spans s ON s.key = p.key AND s.sid = p.sid""").fetchall()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--query", required=True, choices=sorted(RECORDS))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--window-ms", type=int, default=0)
    ap.add_argument("--slide-ms", type=int, default=0)
    ap.add_argument("--session-gap-ms", type=int, default=0)
    ap.add_argument("--lag", type=int, default=0)
    ap.add_argument("--allowed-lateness", type=int, default=0)
    a = ap.parse_args()
    size = a.window_ms
    step = a.slide_ms or size
    gap = a.session_gap_ms
    if (a.query in SESSIONS) != (gap > 0):
        ap.error("--session-gap-ms is required for q11 and nb11, and only for them")
    con = duckdb.connect()
    con.execute(f"CREATE VIEW src AS SELECT * FROM read_csv('{a.dir}/input-*.csv', header=true)")
    con.execute(f"CREATE VIEW recs AS {RECORDS[a.query]}")
    con.execute("""CREATE VIEW marked AS SELECT *, max(t) OVER (PARTITION BY worker ORDER BY seq
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS seen_before FROM recs""")
    if gap > 0:
        con.execute(f"""CREATE VIEW assigned AS SELECT *, floor(t / {gap})::BIGINT * {gap} AS start,
                        (seen_before IS NOT NULL AND t + {a.allowed_lateness} < seen_before - {a.lag}) AS late
                        FROM marked""")
    elif size == 0:
        con.execute(f"""CREATE VIEW assigned AS SELECT *, 0::BIGINT AS start,
                        {END_OF_TIME}::BIGINT AS wend, false AS late FROM marked""")
    else:
        con.execute(f"""CREATE VIEW assigned AS
            SELECT *, start + {size} AS wend,
                   (seen_before IS NOT NULL AND
                    start + {size} + {a.allowed_lateness} <= seen_before - {a.lag}) AS late
            FROM (SELECT *, unnest(range(floor(t / {step})::BIGINT * {step} - {size} + {step},
                                         floor(t / {step})::BIGINT * {step} + 1, {step})) AS start
                  FROM marked)""")
    rows = results(con, a.query, size, gap)
    # Late records per window start (sessions: per gap-sized span of time).
    late = con.execute("SELECT start, count(*) FROM assigned WHERE late GROUP BY start ORDER BY start").fetchall()
    out = sys.stdout
    for r in rows:
        out.write("row," + ",".join(repr(v) if isinstance(v, float) else str(v) for v in r) + "\n")
    for start, n in late:
        out.write(f"late,{start},{n}\n")
    if "key" in [d[0] for d in con.execute("SELECT * FROM assigned LIMIT 0").description]:
        for start, t, key in con.execute("SELECT start, t, key FROM assigned WHERE late").fetchall():
            out.write(f"lrec,{start},{t},{key}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
