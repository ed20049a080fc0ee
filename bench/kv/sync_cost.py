#!/usr/bin/env python3
"""What one write + fdatasync of a small record costs on a directory's disk,
appended (the file grows at every sync) against written over zeros synced
beforehand (sluice-kv's --fsync always keeps zeros ahead of its log:
apps/kv/wal.h, RecordWriterOptions::zeros_ahead), by one writer and by
several at once (the replicas of a job on one machine).

  bench/kv/sync_cost.py [--dir D] [--writes N] [--bytes B] [--writers W]

Prints the median microseconds per write + fdatasync of each case.
"""
import argparse
import multiprocessing
import os
import statistics
import tempfile
import time


def one(path, zeros, writes, size, out):
    record = b"x" * size
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if zeros:
            os.pwrite(fd, bytes(writes * size + (1 << 20)), 0)
            os.fdatasync(fd)
        took = []
        for i in range(writes):
            t0 = time.perf_counter()
            os.pwrite(fd, record, i * size)
            os.fdatasync(fd)
            took.append(time.perf_counter() - t0)
        out.put(statistics.median(took) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)


def run(directory, zeros, writes, size, writers):
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=one, args=(os.path.join(directory, "w%d" % i), zeros,
                                                    writes, size, q)) for i in range(writers)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return statistics.median(q.get() for _ in ps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (a new one)")
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=512)
    ap.add_argument("--writers", type=int, default=3)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sync-cost-", dir=a.dir)
    try:
        for writers in (1, a.writers):
            for zeros in (False, True):
                us = run(d, zeros, a.writes, a.bytes, writers)
                print("%d writer%s, %s: %.0f us per write + fdatasync (median of %d)" % (
                    writers, "s" if writers > 1 else "", "over synced zeros" if zeros else
                    "appended", us, a.writes))
    finally:
        os.rmdir(d)


if __name__ == "__main__":
    main()
