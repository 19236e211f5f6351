#!/usr/bin/env python3
"""Prints, every second, which processes used the machine's CPU, in % of one core, summed by command name.

Usage: hack/cpu-by-process.py [TOP]   (Ctrl-C to stop; TOP processes per line, 9 by default)

"NAME^kids" is CPU of NAME's children that ended and were reaped in that second (iptables runs of kube-router,
runsc commands of containerd's shim); it counts their whole life, so a line's total can pass 100% per core.
Reads /proc only. docs/performance.md uses it to say where a benchmark's CPU went.
"""
import collections
import os
import re
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def snapshot():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        close = stat.rfind(")")
        comm = re.sub(r"^kworker.*", "kworker", stat[stat.find("(") + 1:close])
        fields = stat[close + 2:].split()
        out[pid] = (comm, int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    return out


def main():
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    prev, then = snapshot(), time.time()
    while True:
        time.sleep(1)
        cur, now = snapshot(), time.time()
        used = collections.Counter()
        for pid, (comm, own, kids) in cur.items():
            before = prev.get(pid)
            if before is None or before[0] != comm:
                before = (comm, 0, kids)  # new process (or PID reused): all its CPU is this second's
            used[comm] += own - before[1]
            if kids > before[2]:
                used[comm + "^kids"] += kids - before[2]
        scale = 100.0 / HZ / (now - then)
        with open("/proc/loadavg") as f:
            load = f.read().split()
        busiest = " ".join(f"{c}={v * scale:.0f}" for c, v in used.most_common(top) if v > 0)
        print(time.strftime("%H:%M:%S"), f"total={sum(used.values()) * scale:.0f} load={load[0]} tasks={load[3]}", busiest, flush=True)
        prev, then = cur, now


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
