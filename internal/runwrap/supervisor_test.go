package runwrap

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"airlock.dev/airlock/internal/testutil/sleepers"
)

// A command that kills the client the runtime exec'd for the session (as kill -9 -1 does) changes nothing:
// PID 1 holds the stream, the deadline holds, and the outcome arrives on the same session.
func TestClientKilledDeadlineHolds(t *testing.T) {
	s := sleepers.Unique(t)
	r := startRun(t, s, 2, "--timeout", "1s", "--grace", "200ms", "--shell", "sleep "+s+" & setsid sleep "+s)
	_ = r.sess.client.Process.Kill()
	rep, err := r.wait(t, 5*time.Second)
	if err != nil || rep.Trailer == nil || !rep.Trailer.TimedOut {
		t.Fatalf("want a timeout on the same session after the client was killed, got %+v, %v", rep, err)
	}
	sleepers.WaitNone(t, s, time.Second)
	st := statusOf(t, Request{Config: Config{ID: r.cfg.ID}, Wait: 5 * time.Second})
	if !st.Known || !st.Done || st.Trailer == nil || !st.Trailer.TimedOut {
		t.Fatalf("status: %+v", st)
	}
}

// keeperOf finds the keeper process running the command whose tree holds
// `sleep s`: its parent chain leads to the keeper.
func keeperOf(t *testing.T, s string) int {
	t.Helper()
	for _, pid := range sleepers.List(s) {
		for p := pid; p > 1; {
			st, ok := readStat(p)
			if !ok {
				break
			}
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(st.ppid) + "/cmdline"); strings.HasPrefix(string(b), "airlock-init-keeper") {
				return st.ppid
			}
			p = st.ppid
		}
	}
	t.Fatalf("no keeper above `sleep %s`", s)
	return 0
}

// kill -9 -1 kills the keeper too (same uid, not PID 1): the supervisor
// adopts the orphaned tree, kills it at the deadline, and reports a timeout.
func TestKeeperKilledDeadlineHolds(t *testing.T) {
	s := sleepers.Unique(t)
	r := startRun(t, s, 2, "--timeout", "1s", "--grace", "200ms", "--shell", "sleep "+s+" & setsid sleep "+s)
	if err := syscall.Kill(keeperOf(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = r.sess.client.Process.Kill()
	rep, err := r.wait(t, 5*time.Second)
	if err != nil || rep.Trailer == nil || !rep.Trailer.TimedOut || rep.Trailer.Signal != "SIGKILL" {
		t.Fatalf("want a timeout from the supervisor, got %+v, %v", rep, err)
	}
	sleepers.WaitNone(t, s, time.Second)
	if st := statusOf(t, Request{Config: Config{ID: r.cfg.ID}, Wait: 5 * time.Second}); !st.Done || !st.Trailer.TimedOut {
		t.Fatalf("status: %+v", st)
	}
}

// After its keeper is killed the command keeps writing: PID 1 holds the
// output pipes, so the next write is no SIGPIPE; it forwards the output, and
// the deadline still holds.
func TestKeeperKilledOutputFlows(t *testing.T) {
	s := sleepers.Unique(t)
	r := startConfig(t, parseRun(t, "--timeout", "1500ms", "--grace", "200ms", "--shell", "sleep "+s+"; echo after; sleep "+s), nil)
	sleepers.WaitCount(t, s, 1)
	if err := syscall.Kill(keeperOf(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, pid := range sleepers.List(s) { // the shell goes on to write
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	rep, err := r.wait(t, 10*time.Second)
	if err != nil || rep.Trailer == nil || !rep.Trailer.TimedOut || rep.Trailer.StartError != "" {
		t.Fatalf("want a timeout from the supervisor, got %+v, %v", rep, err)
	}
	if out := r.stdout.String(); !strings.Contains(out, "after\n") || rep.Trailer.StdoutBytes != int64(len("after\n")) {
		t.Fatalf("output written after the keeper died: %q (outcome says %d bytes)", out, rep.Trailer.StdoutBytes)
	}
	sleepers.WaitNone(t, s, time.Second)
}

// Cancel (the engine lost its stream) kills a running command at once.
func TestStatusCancelKillsTree(t *testing.T) {
	s := sleepers.Unique(t)
	r := startRun(t, s, 1, "--timeout", "1m", "--grace", "200ms", "--", "sleep", s)
	rep := statusOf(t, Request{Config: Config{ID: r.cfg.ID}, Cancel: true, Wait: 5 * time.Second})
	if !rep.Done || rep.Trailer == nil || rep.Trailer.Signal == "" {
		t.Fatalf("status: %+v", rep)
	}
	_, _ = r.wait(t, 5*time.Second)
	sleepers.WaitNone(t, s, time.Second)
	if rep := statusOf(t, Request{Config: Config{ID: "no-such-run-0123456789"}}); rep.Known {
		t.Fatalf("unknown id: %+v", rep)
	}
}

// Only clients may talk to the supervisor: a command's connection is closed
// unanswered, so it cannot open a session (and so neither start runs nor read
// outcomes).
func TestCommandsCannotUseSupervisor(t *testing.T) {
	r := runWrapper(t, nil, "--env", SocketEnv+"="+socketName, "--", wrapperBin, "connect")
	if r.trailer == nil || r.trailer.ExitCode != ExitWrapperError || !strings.HasPrefix(r.stderr, "airlock-init: ") {
		t.Fatalf("a command reached the supervisor: %+v stderr %q", r.trailer, r.stderr)
	}
}

// spareKeepers are the keepers PID 1 started ahead that hold no run yet.
func spareKeepers(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, ok := readStat(pid)
		if !ok || !strings.HasPrefix(string(b), "airlock-init-keeper") || len(liveChildren(pid)) > 0 {
			continue
		}
		if pb, _ := os.ReadFile("/proc/" + strconv.Itoa(st.ppid) + "/cmdline"); strings.HasPrefix(string(pb), wrapperBin+"\x00pid1") {
			out = append(out, pid)
		}
	}
	return out
}

// A command can kill the spare keeper (kill -9 -1 does): the next run gets a fresh one.
func TestSpareKeeperKilled(t *testing.T) {
	runWrapper(t, nil, "--", "true") // a spare exists after any run
	var spares []int
	for end := time.Now().Add(5 * time.Second); len(spares) == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		spares = spareKeepers(t)
	}
	if len(spares) == 0 {
		t.Fatal("no spare keeper after a run")
	}
	for _, pid := range spares {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	r := runWrapper(t, nil, "--shell", "echo ok")
	if r.trailer == nil || r.trailer.ExitCode != 0 || r.stdout != "ok\n" {
		t.Fatalf("run after the spare keeper was killed: %+v stdout %q", r.trailer, r.stdout)
	}
}

// PID 1 out of descriptors (the sandbox's commands can use up what the node allows) keeps accepting once some
// are free again: a failed accept is retried, not the end of the service. Fails with Serve returning on an
// accept error (checked once: the session after the flood was refused).
func TestAcceptRecoversFromEMFILE(t *testing.T) {
	env := []string{SocketEnv + fmt.Sprintf("=@airlock-runwrap-emfile-%d", os.Getpid())}
	pid1, key, err := startPID1Env(wrapperBin, env)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pid1.Process.Kill(); _ = pid1.Wait() }()
	openSessionEnv(t, env, key).close() // it serves
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid1.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var was unix.Rlimit
	if err := unix.Prlimit(pid1.Process.Pid, unix.RLIMIT_NOFILE, nil, &was); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prlimit(pid1.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(len(fds) + 4), Max: was.Max}, nil); err != nil {
		t.Fatal(err)
	}
	// Idle connections hold one descriptor each in PID 1 until they send their request: more than it may open.
	addr := &net.UnixAddr{Name: strings.TrimPrefix(env[0], SocketEnv+"="), Net: "unix"}
	var idle []*net.UnixConn
	for range 12 {
		c, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			break
		}
		idle = append(idle, c)
	}
	time.Sleep(500 * time.Millisecond) // accepts fail with EMFILE meanwhile
	for _, c := range idle {
		_ = c.Close()
	}
	if err := unix.Prlimit(pid1.Process.Pid, unix.RLIMIT_NOFILE, &was, nil); err != nil {
		t.Fatal(err)
	}
	r, rep := runOn(t, openSessionEnv(t, env, key), parseRun(t, "--", "echo", "served"), nil)
	if rep.Error != "" || r.stdout != "served\n" {
		t.Fatalf("after the descriptors were freed: %+v %q", rep, r.stdout)
	}
}

// A run that leaves nothing behind gives its keeper back for the next run: sequential runs start (almost) no
// keeper process of their own. Fails with keepers not reused (checked once: a new keeper per run).
func TestKeepersAreReused(t *testing.T) {
	seen := map[int]bool{}
	for range 10 {
		if r := runWrapper(t, nil, "--", "true"); r.trailer == nil || r.trailer.ExitCode != 0 {
			t.Fatalf("%+v", r.trailer)
		}
		for _, pid := range processesNamed(t, pid1PID, "airlock-init-keeper") {
			seen[pid] = true
		}
	}
	if len(seen) > 4 {
		t.Fatalf("%d keepers for 10 runs one after the other, want them reused", len(seen))
	}
}
