package runwrap

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MemoryGuardEnv configures PID 1's memory guard: "off", or the headroom in
// MiB (a decimal integer). It is read from PID 1's environment, where the
// manager puts its --memory-guard; a sandbox's env cannot set it (AIRLOCK_
// names are reserved: sandbox.CheckPodEnvName).
const MemoryGuardEnv = "AIRLOCK_MEMORY_GUARD"

// DefaultMemoryHeadroom is how far below the sandbox's memory limit the guard
// kills: what the host charges the runtime beyond what the guest sees (gVisor's
// sentry and gofer), plus the allocation of one poll interval, plus margin.
// Measured in docs/runtimes.md ("Memory").
const DefaultMemoryHeadroom = 160 << 20

// DefaultMemoryPoll is how often the guard reads the sandbox's usage.
const DefaultMemoryPoll = 50 * time.Millisecond

// MemoryGuard kills the largest command tree before the host's OOM killer
// takes the whole sandbox (gVisor: the pod's cgroup covers the sentry, and
// the in-sandbox limit is not enforced).
type MemoryGuard struct {
	// Headroom: kill when Used > Limit - Headroom.
	Headroom uint64
	Interval time.Duration
	// Usage reads the sandbox's memory (SandboxMemory in production).
	Usage func() (MemUsage, error)
}

// MemUsage is the sandbox's memory as seen from inside.
type MemUsage struct {
	Used, Limit uint64
	// Source names where it was read ("cgroup v1", "/proc/meminfo", ...).
	Source string
}

// ParseMemoryGuard reads MemoryGuardEnv's value; ok is false for "off".
func ParseMemoryGuard(v string) (headroom uint64, ok bool, err error) {
	switch v = strings.TrimSpace(v); v {
	case "":
		return DefaultMemoryHeadroom, true, nil
	case "off":
		return 0, false, nil
	}
	mib, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("%s=%q: want off or a headroom in MiB: %w", MemoryGuardEnv, v, err)
	}
	return mib << 20, true, nil
}

// threshold is the usage above which the guard kills; 0 disables it (a
// limit no larger than the headroom leaves nothing to guard).
func (g *MemoryGuard) threshold(limit uint64) uint64 {
	if limit <= g.Headroom {
		return 0
	}
	return limit - g.Headroom
}

// parseMeminfo returns MemTotal and MemAvailable in bytes.
func parseMeminfo(b []byte) (total, avail uint64, err error) {
	var haveT, haveA bool
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "MemTotal" && k != "MemAvailable") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("meminfo %s: %w", k, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			n <<= 10
		}
		if k == "MemTotal" {
			total, haveT = n, true
		} else {
			avail, haveA = n, true
		}
	}
	if !haveT || !haveA || avail > total {
		return 0, 0, fmt.Errorf("meminfo: no MemTotal/MemAvailable")
	}
	return total, avail, nil
}

// statValue returns key's value from a cgroup memory.stat.
func statValue(b []byte, key string) uint64 {
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// procMem is one process of a /proc snapshot.
type procMem struct {
	ppid int
	rss  uint64
}

// memCandidate is a tree the guard may kill: a run's command (the keeper's
// descendants, not the keeper), an orphaned run's roots, or a kept leftover.
type memCandidate struct {
	run         *run
	roots       []int
	includeRoot bool
	viaKeeper   bool
}

// treeRSS returns the pids of cand's tree in procs and their summed RSS.
func treeRSS(procs map[int]procMem, cand memCandidate) ([]int, uint64) {
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var pids []int
	var rss uint64
	seen := map[int]bool{}
	var queue []int
	for _, r := range cand.roots {
		if cand.includeRoot {
			queue = append(queue, r)
		} else {
			seen[r] = true
			queue = append(queue, children[r]...)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		p, ok := procs[pid]
		if !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		pids = append(pids, pid)
		rss += p.rss
		queue = append(queue, children[pid]...)
	}
	return pids, rss
}

// largest returns the index of the candidate whose tree holds the most RSS,
// its pids and RSS; -1 if every tree is empty.
func largest(procs map[int]procMem, cands []memCandidate) (int, []int, uint64) {
	best, bestPids, bestRSS := -1, []int(nil), uint64(0)
	for i, c := range cands {
		pids, rss := treeRSS(procs, c)
		if len(pids) > 0 && (best < 0 || rss > bestRSS) {
			best, bestPids, bestRSS = i, pids, rss
		}
	}
	return best, bestPids, bestRSS
}
