package runwrap

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes orphaned descendants re-parent to us instead of PID 1,
// which keeps processes that setsid() or double-fork inside our tree.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

type procInfo struct {
	ppid  int
	state byte
}

// readStat parses /proc/<pid>/stat. comm may contain spaces and parentheses,
// so fields are taken after the last ')'.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procInfo{}, false
	}
	return procInfo{ppid: ppid, state: f[0][0]}, true
}

// liveDescendants lists the processes below root (excluding root) that are
// not zombies. A process that exits during the walk is simply missed; callers
// loop until the list is empty.
func liveDescendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	state := map[int]byte{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			children[st.ppid] = append(children[st.ppid], pid)
			state[pid] = st.state
		}
	}
	var out []int
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if s := state[pid]; s != 'Z' && s != 'X' {
			out = append(out, pid)
		}
		queue = append(queue, children[pid]...)
	}
	return out
}

// liveChildren lists the direct children of pid that are not zombies.
func liveChildren(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(p); ok && st.ppid == pid && st.state != 'Z' && st.state != 'X' {
			out = append(out, p)
		}
	}
	return out
}

// signalTree sends sig to the process group pgid (if > 0) and to every live
// descendant of root. ESRCH is expected (processes exit meanwhile).
func signalTree(root, pgid int, sig syscall.Signal) int {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
	pids := liveDescendants(root)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return len(pids)
}

// killTree terminates everything below root: SIGTERM (plus SIGCONT so stopped
// processes see it), up to grace for them to go, then SIGKILL until nothing is
// left. It returns how many processes were alive when it started. Zombies are
// not waited for here; reapOrphans collects them.
func killTree(root, pgid int, grace time.Duration) int {
	n := signalTree(root, pgid, syscall.SIGTERM)
	signalTree(root, pgid, syscall.SIGCONT)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(liveDescendants(root)) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// Bounded: a killed process cannot fork, so each round only finds
	// children forked before the previous round's SIGKILL landed.
	for i := 0; i < 200; i++ {
		if signalTree(root, pgid, syscall.SIGKILL) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// reapOrphans collects exited children (re-parented orphans included). Only
// call it once the command itself has been waited for, or it could steal the
// command's status from os/exec.
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || errors.Is(err, syscall.ECHILD) {
			return
		}
	}
}

// hasChildren reaps exited children and reports whether live ones remain.
// Thanks to the subreaper bit, no children means no descendants at all, which
// spares the /proc walk in the common case. Same caveat as reapOrphans.
func hasChildren() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return false // ECHILD
		case pid == 0:
			return true
		}
	}
}

// oomKillCount reads the container cgroup's oom_kill counter (cgroup v2, then
// v1); -1 if unavailable.
func oomKillCount() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, ok := parseOOMKill(b); ok {
			return n
		}
	}
	return -1
}

func parseOOMKill(b []byte) (int64, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// signalName names a signal as "SIGKILL"; unknown numbers as "SIG<n>".
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
