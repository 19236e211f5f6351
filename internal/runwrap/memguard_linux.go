package runwrap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// unlimited: cgroup limits at or above this mean "no limit" (v1 reports
// PAGE_COUNTER_MAX pages, v2 "max").
const unlimited = 1 << 60

// SandboxMemory reads the sandbox's memory use and limit: the container's
// cgroup if it has a limit (runc: /proc/meminfo is the host's), else
// /proc/meminfo (gVisor fills it from the pod's limit). Used excludes
// inactive file cache, which the kernel reclaims before it OOM-kills.
func SandboxMemory() (MemUsage, error) {
	if u, ok := cgroupMemory("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.stat", "inactive_file", "cgroup v2"); ok {
		return u, nil
	}
	if u, ok := cgroupMemory("/sys/fs/cgroup/memory/memory.usage_in_bytes", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		"/sys/fs/cgroup/memory/memory.stat", "total_inactive_file", "cgroup v1"); ok {
		return u, nil
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return MemUsage{}, fmt.Errorf("read memory usage: %w", err)
	}
	total, avail, err := parseMeminfo(b)
	if err != nil {
		return MemUsage{}, err
	}
	return MemUsage{Used: total - avail, Limit: total, Source: "/proc/meminfo"}, nil
}

func cgroupMemory(usage, limit, stat, inactiveKey, source string) (MemUsage, bool) {
	l, err := readUint(limit)
	if err != nil || l == 0 || l >= unlimited {
		return MemUsage{}, false
	}
	u, err := readUint(usage)
	if err != nil {
		return MemUsage{}, false
	}
	if b, err := os.ReadFile(stat); err == nil {
		if inactive := statValue(b, inactiveKey); inactive < u {
			u -= inactive
		}
	}
	return MemUsage{Used: u, Limit: l, Source: source}, true
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return unlimited, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// snapshotMem reads every live process's parent and resident set.
func snapshotMem() map[int]procMem {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	page := uint64(os.Getpagesize())
	out := map[int]procMem{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok || st.state == 'Z' || st.state == 'X' {
			continue
		}
		var rss uint64
		if b, err := os.ReadFile("/proc/" + e.Name() + "/statm"); err == nil {
			if f := bytes.Fields(b); len(f) > 1 {
				n, _ := strconv.ParseUint(string(f[1]), 10, 64)
				rss = n * page
			}
		}
		out[pid] = procMem{ppid: st.ppid, rss: rss}
	}
	return out
}

// GuardMemory polls the sandbox's memory every g.Interval while a run or a
// kept leftover exists and, above the threshold, SIGKILLs the largest command
// tree (by RSS). A run it kills ends with Trailer.OOMGuard set. With nothing to
// guard it sleeps until something appears (s.busy). It never returns.
func (s *Supervisor) GuardMemory(g MemoryGuard) {
	tick := time.NewTicker(g.Interval)
	defer tick.Stop()
	var lastErr string
	for {
		if !s.guarding() {
			tick.Stop()
			<-s.busy
			tick.Reset(g.Interval)
			continue
		}
		<-tick.C
		u, err := g.Usage()
		if err != nil {
			if err.Error() != lastErr {
				fmt.Fprintf(s.log, "airlock-init pid1: memory guard: %v\n", err)
				lastErr = err.Error()
			}
			continue
		}
		th := g.threshold(u.Limit)
		if th == 0 || u.Used <= th {
			continue
		}
		cands := s.memCandidates()
		i, pids, rss := largest(snapshotMem(), cands)
		if i < 0 {
			continue
		}
		detail := fmt.Sprintf("the sandbox's memory guard killed it at %d MiB used of %d MiB (%s; threshold %d MiB); its processes held %d MiB",
			u.Used>>20, u.Limit>>20, u.Source, th>>20, rss>>20)
		id := "a kept leftover"
		if c := cands[i].run; c != nil {
			id = "run " + c.cfg.ID
		}
		fmt.Fprintf(s.log, "airlock-init pid1: memory guard: killing %s (%d processes): %s\n", id, len(pids), detail)
		s.guardKill(cands[i], pids, detail)
	}
}

// guarding reports whether anything may need the guard: a run that has not
// ended, or a leftover kept on purpose.
func (s *Supervisor) guarding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		select {
		case <-r.ended:
		default:
			return true
		}
	}
	for _, kept := range s.claimed {
		if kept {
			return true
		}
	}
	return false
}

// memCandidates lists the trees the guard may kill.
func (s *Supervisor) memCandidates() []memCandidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []memCandidate
	for _, r := range s.runs {
		select {
		case <-r.ended:
			continue
		default:
		}
		if _, ok := s.waiters[r.keeper]; ok {
			out = append(out, memCandidate{run: r, roots: []int{r.keeper}, viaKeeper: true})
		} else if len(r.orphans) > 0 {
			out = append(out, memCandidate{run: r, roots: r.orphans, includeRoot: true})
		}
	}
	for pid, kept := range s.claimed {
		if kept {
			out = append(out, memCandidate{roots: []int{pid}, includeRoot: true})
		}
	}
	return out
}

// guardKill kills c's tree. A live keeper is asked to (it marks its trailer
// before the command dies); PID 1 kills directly what is left after a second.
func (s *Supervisor) guardKill(c memCandidate, pids []int, detail string) {
	if c.run != nil {
		c.run.oomGuard.CompareAndSwap(nil, &detail)
	}
	direct := !c.viaKeeper
	if c.viaKeeper {
		if err := c.run.tell(Request{Op: opMemoryKill, Reason: detail}); err != nil && !errors.Is(err, os.ErrClosed) {
			direct = true
		}
	}
	for end := time.Now().Add(time.Second); ; {
		n := 0
		for _, pid := range pids {
			if st, ok := readStat(pid); ok && st.state != 'Z' && st.state != 'X' {
				n++
				if direct {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			direct = true
		}
		if time.Now().After(end.Add(time.Second)) {
			fmt.Fprintf(s.log, "airlock-init pid1: memory guard: %d processes survived SIGKILL\n", n)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
