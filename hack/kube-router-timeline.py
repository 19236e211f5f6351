#!/usr/bin/env python3
"""Times, for each new pod, how long the local cluster took to put its NetworkPolicy rules in effect.

Usage: hack/kube-router-timeline.py SINCE [POD-SUBSTRING]   (SINCE: HH:MM:SS UTC today; POD-SUBSTRING: "/sbx")

For every pod whose name holds POD-SUBSTRING and that started after SINCE, it joins the local cluster's logs:
containerd's StartContainer return (the container runs), the kubelet's status write with the pod's IP (seen as
kube-router's "Received update to pod", its second for that pod: the first is the host IP while pending), and
the kube-router sync that followed until its iptables-restore returned (the pod's rules in effect). It prints
p50, p90 and range of each step. kube-router logs these lines only at verbosity 2:
  hack/local-cluster.sh kill kube-router && KUBE_ROUTER_V=2 hack/local-cluster.sh start kube-router
docs/performance.md uses it to say where a cold sandbox's time after its container starts goes.
"""
import re
import sys

LOGS = "/var/lib/airlock-cluster/log"


def seconds(h, m, s):
    return int(h) * 3600 + int(m) * 60 + float(s)


def lines_since(log, stamp, since):
    """Yields (seconds of the day, line) for the lines of LOGS/log whose time (regex stamp: hour, minute,
    second) is not before since."""
    with open(f"{LOGS}/{log}") as f:
        for line in f:
            m = re.search(stamp, line)
            if m and (t := seconds(*m.groups())) >= since:
                yield t, line


def kube_router(since):
    """Returns {pod: [times of relevant updates]} and the syncs [{start, restored, end}] after since."""
    updates, syncs, cur = {}, [], None
    for t, line in lines_since("kube-router.log", r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+)", since):
        if u := re.search(r"Received update to pod: (\S+)", line):
            updates.setdefault(u[1], []).append(t)
        elif "Starting sync of iptables" in line:
            cur = {"start": t}
        elif "Restoring IPv4 iptables rules took" in line and cur:
            cur["restored"] = t
        elif "sync iptables took" in line and cur:
            cur["end"] = t
            syncs.append(cur)
            cur = None
    return updates, syncs


def container_starts(since):
    """Returns {namespace/pod: time its (last) container start returned} from containerd's log."""
    sandbox_pod, container_pod, started = {}, {}, {}
    for t, line in lines_since("containerd.log", r'time="[\d-]+T(\d\d):(\d\d):(\d\d\.\d+)Z"', since):
        if r := re.search(r'RunPodSandbox for name:\\"([^\\]+)\\".*namespace:\\"([^\\]+)\\" returns sandbox id \\"(\w+)', line):
            sandbox_pod[r[3]] = f"{r[2]}/{r[1]}"
        elif (c := re.search(r'CreateContainer within sandbox \\"(\w+)\\".*returns container id \\"(\w+)', line)) and c[1] in sandbox_pod:
            container_pod[c[2]] = sandbox_pod[c[1]]
        elif (s := re.search(r'StartContainer for \\"(\w+)\\" returns successfully', line)) and s[1] in container_pod:
            started[container_pod[s[1]]] = t
    return started


def quantile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    since = seconds(*sys.argv[1].split(":"))
    want = sys.argv[2] if len(sys.argv) > 2 else ""
    updates, syncs = kube_router(since)
    started = container_starts(since)
    steps = {"container started -> pod IP at kube-router": [], "pod IP -> sync start": [],
             "sync start -> iptables-restore returned": [], "container started -> rules in effect": []}
    queued = 0
    for pod, times in updates.items():
        if want not in pod or len(times) < 2 or pod not in started:
            continue
        ip_seen = times[1]
        sync = next((s for s in syncs if s["start"] >= ip_seen and "restored" in s), None)
        if sync is None:
            continue
        queued += any(s["start"] < ip_seen <= s["end"] for s in syncs)
        for name, d in zip(steps, (ip_seen - started[pod], sync["start"] - ip_seen,
                                   sync["restored"] - sync["start"], sync["restored"] - started[pod])):
            steps[name].append(1000 * d)
    n = len(steps["pod IP -> sync start"])
    if n == 0:
        sys.exit("no pod matched (is kube-router at verbosity 2?)")
    print(f"{n} pods matching {want!r}; {queued} of them had their IP arrive during another sync")
    for name, v in steps.items():
        print(f"{name}: p50 {quantile(v, .5):.0f} ms, p90 {quantile(v, .9):.0f} ms ({min(v):.0f}-{max(v):.0f})")
    durations = [1000 * (s["end"] - s["start"]) for s in syncs]
    print(f"all {len(syncs)} syncs: p50 {quantile(durations, .5):.0f} ms, p90 {quantile(durations, .9):.0f} ms")


if __name__ == "__main__":
    main()
