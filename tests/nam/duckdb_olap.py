#!/usr/bin/env python3
"""The independent oracle of the sluice-nam-olap tests: joins or aggregates,
in SQL (DuckDB), the data the memory servers wrote as CSV
(sluice-nam-olap --dump DIR), and prints the result the command must match:

    join:  matches <n> checksum <sum of mix64(key*C1 ^ r.payload*C2 ^ (s.payload+C3)*C4)>
           flow_checksum <the same with apps/join's C4 (join::pair_checksum)>
    agg:   groups <n> rows <n> checksum <sum of mix64(key*C1 ^ count*C2 ^ (sum+C3)*C4)>

(sums modulo 2^64, as apps/nam/olap.h defines them). DuckDB does the join or
the GROUP BY; this script only folds its rows into the checksum.
"""
import argparse

import duckdb

MASK = (1 << 64) - 1
C1, C2, C3, C4 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5
JOIN_C4 = 0xD6E8FEB86659FD93  # apps/join/tuples.h, pair_checksum


def mix64(x):
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK
    x ^= x >> 33
    return x


def fold(a, b, c, c4=C4):
    return mix64(((a * C1) & MASK) ^ ((b * C2) & MASK) ^ (((c + C3) * c4) & MASK))


def table(con, name, pattern, second):
    con.execute(
        f"CREATE VIEW {name} AS SELECT * FROM read_csv('{pattern}', header=true, "
        f"columns={{'key': 'UBIGINT', '{second}': 'UBIGINT'}})"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kind", required=True, choices=["join", "agg"])
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    con = duckdb.connect()
    if a.kind == "join":
        table(con, "r", f"{a.dir}/R-*.csv", "payload")
        table(con, "s", f"{a.dir}/S-*.csv", "payload")
        rows = con.execute(
            "SELECT r.key, r.payload, s.payload FROM r JOIN s ON r.key = s.key"
        ).fetchall()
        checksum = sum(fold(k, rp, sp) for k, rp, sp in rows) & MASK
        flow = sum(fold(k, rp, sp, JOIN_C4) for k, rp, sp in rows) & MASK
        print(f"matches {len(rows)} checksum {checksum} flow_checksum {flow}")
    else:
        table(con, "t", f"{a.dir}/rows-*.csv", "value")
        groups = con.execute("SELECT key, count(*), sum(value) FROM t GROUP BY key").fetchall()
        checksum = sum(fold(k, n, s & MASK) for k, n, s in groups) & MASK
        print(f"groups {len(groups)} rows {sum(n for _, n, _ in groups)} checksum {checksum}")


if __name__ == "__main__":
    main()
