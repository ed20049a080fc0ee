# orders.py: every rank makes orders, each goes to the rank its key hashes to
# (docs/python.md). Run: build/bin/sluice run -n 4 -- .venv/bin/python orders.py
import numpy as np

import sluice

order = np.dtype([("key", "<u8"), ("amount", "<u8")])

with sluice.Cluster.from_env() as cluster:
    mine = np.zeros(100_000, order)
    mine["key"] = np.arange(100_000) * cluster.world_size + cluster.rank
    mine["amount"] = 1
    with cluster.shuffle("orders", order, key="key") as flow:
        got = flow.exchange(mine)  # this rank's share of every rank's orders
    total = cluster.allreduce(int(got["amount"].sum()))
    if cluster.rank == 0:
        print("orders:", total)  # 100000 * world_size
