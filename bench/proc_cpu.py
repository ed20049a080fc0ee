"""CPU-seconds of processes from /proc, for the benchmark programs (bench/kv,
bench/python): cpu_seconds(pids) and descendants(pid), a process and every
process below it (a launcher's ranks, a local Ray cluster's processes)."""

import os
import subprocess


def cpu_seconds(pids):
    """utime + stime of the given processes, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def descendants(pid):
    """`pid` and every process below it (from ps: parents of each)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children = {}
    for line in out.split("\n"):
        parts = line.split()
        if len(parts) == 2:
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found
