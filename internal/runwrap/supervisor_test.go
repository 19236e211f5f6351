package runwrap

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
	"airlock.dev/airlock/internal/testutil/sleepers"
)

// statusOf asks the supervisor for a run's outcome, as the engine does after
// a lost stream.
func statusOf(t *testing.T, req Request) Reply {
	t.Helper()
	var in, out bytes.Buffer
	if err := WriteFrame(&in, &req); err != nil {
		t.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(wrapperBin, "status"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = &in, &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("status: %v", err)
	}
	var rep Reply
	if err := ReadFrame(&out, &rep); err != nil {
		t.Fatalf("status output %q: %v", out.String(), err)
	}
	return rep
}

// startRun starts a client for args and waits until n `sleep s` run.
func startRun(t *testing.T, s string, n int, args ...string) (*exec.Cmd, *bytes.Buffer, Config) {
	t.Helper()
	cfg, err := ParseArgs(append([]string{"--nonce", testNonce, "--out-dir", t.TempDir()}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := execCmd(t, cfg)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sleepers.WaitCount(t, s, n)
	return cmd, &stderr, cfg
}

// A command that kills its client (as kill -9 -1 does) still meets its
// deadline: the supervisor holds the stream, writes the trailer, and the
// outcome can be read back.
func TestClientKilledDeadlineHolds(t *testing.T) {
	s := sleepers.Unique(t)
	cmd, stderr, cfg := startRun(t, s, 2, "--timeout", "1s", "--grace", "200ms", "--shell", "sleep "+s+" & setsid sleep "+s)
	start := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // returns once the supervisor closes the stream
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("stream ended %v after the kill", el)
	}
	_, tr := splitTrailer(t, stderr.String())
	if tr == nil || !tr.TimedOut {
		t.Fatalf("want a timeout trailer on the stream, got %q", stderr.String())
	}
	sleepers.WaitNone(t, s, time.Second)
	rep := statusOf(t, Request{Config: Config{ID: cfg.ID}, Wait: 5 * time.Second})
	if !rep.Known || !rep.Done || rep.Trailer == nil || !rep.Trailer.TimedOut {
		t.Fatalf("status: %+v", rep)
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
	cmd, stderr, cfg := startRun(t, s, 2, "--timeout", "1s", "--grace", "200ms", "--shell", "sleep "+s+" & setsid sleep "+s)
	if err := syscall.Kill(keeperOf(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	start := time.Now()
	_ = cmd.Wait()
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("stream ended %v after the kill", el)
	}
	_, tr := splitTrailer(t, stderr.String())
	if tr == nil || !tr.TimedOut || tr.Signal != "SIGKILL" {
		t.Fatalf("want a timeout trailer from the supervisor, got %q", stderr.String())
	}
	sleepers.WaitNone(t, s, time.Second)
	if rep := statusOf(t, Request{Config: Config{ID: cfg.ID}, Wait: 5 * time.Second}); !rep.Done || !rep.Trailer.TimedOut {
		t.Fatalf("status: %+v", rep)
	}
}

// After its keeper is killed the command keeps writing: PID 1 holds the
// output pipes, so the next write is no SIGPIPE; it forwards the output, and
// the deadline still holds.
func TestKeeperKilledOutputFlows(t *testing.T) {
	s := sleepers.Unique(t)
	cfg, err := ParseArgs([]string{"--nonce", testNonce, "--out-dir", t.TempDir(), "--timeout", "1500ms", "--grace", "200ms",
		"--shell", "sleep " + s + "; echo after; sleep " + s})
	if err != nil {
		t.Fatal(err)
	}
	cmd := execCmd(t, cfg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sleepers.WaitCount(t, s, 1)
	if err := syscall.Kill(keeperOf(t, s), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, pid := range sleepers.List(s) { // the shell goes on to write
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = cmd.Wait()
	_, tr := splitTrailer(t, stderr.String())
	if tr == nil || !tr.TimedOut || tr.StartError != "" {
		t.Fatalf("want a timeout trailer from the supervisor, got %q", stderr.String())
	}
	if !strings.Contains(stdout.String(), "after\n") || tr.StdoutBytes != int64(len("after\n")) {
		t.Fatalf("output written after the keeper died: %q (trailer says %d bytes)", stdout.String(), tr.StdoutBytes)
	}
	sleepers.WaitNone(t, s, time.Second)
}

// Cancel (the engine lost its stream) kills a running command at once.
func TestStatusCancelKillsTree(t *testing.T) {
	s := sleepers.Unique(t)
	cmd, _, cfg := startRun(t, s, 1, "--timeout", "1m", "--grace", "200ms", "--", "sleep", s)
	rep := statusOf(t, Request{Config: Config{ID: cfg.ID}, Cancel: true, Wait: 5 * time.Second})
	if !rep.Done || rep.Trailer == nil || rep.Trailer.Signal == "" {
		t.Fatalf("status: %+v", rep)
	}
	_ = cmd.Wait()
	sleepers.WaitNone(t, s, time.Second)
	if rep := statusOf(t, Request{Config: Config{ID: "no-such-run-0123456789"}}); rep.Known {
		t.Fatalf("unknown id: %+v", rep)
	}
}

// Only clients may talk to the supervisor: a command's connection is closed
// unanswered, so it can neither start runs nor read outcomes.
func TestCommandsCannotUseSupervisor(t *testing.T) {
	var frame bytes.Buffer
	if err := WriteFrame(&frame, &Request{Config: Config{ID: "test-run-0000000000000001"}}); err != nil {
		t.Fatal(err)
	}
	r := runWrapper(t, ptr(frame.String()), "--env", SocketEnv+"="+socketName, "--", wrapperBin, "status")
	if r.trailer == nil || r.trailer.ExitCode != ExitWrapperError || !strings.Contains(r.stderr, "airlock-init status") {
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
