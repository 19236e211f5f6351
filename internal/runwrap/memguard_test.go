package runwrap

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseMeminfo(t *testing.T) {
	total, avail, err := parseMeminfo([]byte("MemTotal:        1048576 kB\nMemFree:          900000 kB\nMemAvailable:     786432 kB\n"))
	if err != nil || total != 1<<30 || avail != 768<<20 {
		t.Fatalf("got %d %d %v", total, avail, err)
	}
	for _, bad := range []string{"", "MemTotal: 10 kB\n", "MemTotal: 10 kB\nMemAvailable: 20 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\n"} {
		if _, _, err := parseMeminfo([]byte(bad)); err == nil {
			t.Errorf("parseMeminfo(%q): want an error", bad)
		}
	}
	if n := statValue([]byte("cache 5\ntotal_inactive_file 4096\n"), "total_inactive_file"); n != 4096 {
		t.Errorf("statValue = %d", n)
	}
}

func TestMemoryGuardConfig(t *testing.T) {
	for v, want := range map[string]uint64{"": DefaultMemoryHeadroom, "64": 64 << 20, " 200 ": 200 << 20} {
		if h, on, err := ParseMemoryGuard(v); err != nil || !on || h != want {
			t.Errorf("ParseMemoryGuard(%q) = %d %v %v", v, h, on, err)
		}
	}
	if _, on, err := ParseMemoryGuard("off"); on || err != nil {
		t.Errorf("off: %v %v", on, err)
	}
	if _, _, err := ParseMemoryGuard("-1"); err == nil {
		t.Error("-1: want an error")
	}
	g := MemoryGuard{Headroom: 160 << 20}
	if th := g.threshold(1 << 30); th != 864<<20 {
		t.Errorf("threshold = %d", th)
	}
	if th := g.threshold(100 << 20); th != 0 {
		t.Errorf("a limit below the headroom must disable the guard, got %d", th)
	}
}

func TestLargestTree(t *testing.T) {
	// 10 and 20 are keepers (not counted), 30 a kept leftover counted with
	// its child.
	procs := map[int]procMem{
		10: {ppid: 1, rss: 900}, 11: {ppid: 10, rss: 50}, 12: {ppid: 11, rss: 60},
		20: {ppid: 1, rss: 5}, 21: {ppid: 20, rss: 100},
		30: {ppid: 1, rss: 70}, 31: {ppid: 30, rss: 40},
	}
	cands := []memCandidate{{roots: []int{10}}, {roots: []int{20}}, {roots: []int{30}, includeRoot: true}}
	i, pids, rss := largest(procs, cands)
	if i != 0 || rss != 110 || len(pids) != 2 {
		t.Fatalf("got %d %v %d, want the first run's 11+12 (110)", i, pids, rss)
	}
	procs[31] = procMem{ppid: 30, rss: 400}
	if i, _, rss := largest(procs, cands); i != 2 || rss != 470 {
		t.Fatalf("got %d %d, want the leftover with its child (470)", i, rss)
	}
	if i, _, _ := largest(map[int]procMem{10: {ppid: 1}}, cands[:1]); i != -1 {
		t.Fatalf("a keeper without a command is no candidate, got %d", i)
	}
}

// A real allocating command, beside a small one, is SIGKILLed by the guard
// once the (fake) usage crosses the threshold; its trailer says so and the
// small one finishes normally.
func TestMemoryGuardKillsLargest(t *testing.T) {
	dir := t.TempDir()
	usage := filepath.Join(dir, "usage")
	env := []string{SocketEnv + fmt.Sprintf("=@airlock-runwrap-memguard-%d", os.Getpid())}
	pid1, keys, err := launchPID1(wrapperBin, env, "pid1-fakemem", usage)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pid1.Process.Kill(); _ = pid1.Wait() }()
	key, ok := <-keys
	if !ok {
		t.Fatal("the fake PID 1 did not attest")
	}
	time.Sleep(200 * time.Millisecond) // listening

	start := func(shell string) *asyncRun {
		return startOn(t, openSessionEnv(t, env, key), parseRun(t, "--timeout", "20s", "--shell", shell), nil)
	}
	small := start("sleep 2")
	// ~64 MiB of shell string, then it waits: the largest tree by far. The fake usage is charged to that shell,
	// so it drops once the shell is dead, as real usage would (else the guard would rightly go on killing).
	bigPID := filepath.Join(dir, "big.pid")
	big := start("echo $$ >" + bigPID + "; x=0123456789abcdef; i=0; while [ $i -lt 22 ]; do x=$x$x; i=$((i+1)); done; echo grown; sleep 30")
	time.Sleep(1500 * time.Millisecond)
	owner, err := os.ReadFile(bigPID)
	if err != nil {
		t.Fatalf("the big command did not record its pid: %v", err)
	}
	if err := os.WriteFile(usage, []byte("995000000 1000000000 "+strings.TrimSpace(string(owner))), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	rep, err := big.wait(t, 10*time.Second)
	took := time.Since(t0)
	_ = os.WriteFile(usage, []byte("0 1000000000"), 0o600)
	if err != nil || rep.Trailer == nil || rep.Trailer.OOMGuard == "" || rep.Trailer.Signal != "SIGKILL" || took > 2*time.Second {
		t.Fatalf("want the big command killed by the guard within 2s, got %+v, %v after %v", rep, err, took)
	}
	t.Logf("killed after %v: %s", took, rep.Trailer.OOMGuard)
	if rep, err := small.wait(t, 10*time.Second); err != nil || rep.Trailer == nil || rep.Trailer.OOMGuard != "" || rep.Trailer.ExitCode != 0 {
		t.Fatalf("the small command must finish normally, got %+v, %v", rep, err)
	}
}

// An idle sandbox's guard reads nothing (under gVisor every wakeup costs the
// sentry CPU, and most sandboxes are idle most of the time); a run wakes it,
// and it sleeps again once the run has ended.
func TestMemoryGuardSleepsWhileIdle(t *testing.T) {
	s, err := NewSupervisor(io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	go s.GuardMemory(MemoryGuard{Headroom: 1, Interval: time.Millisecond, Usage: func() (MemUsage, error) {
		reads.Add(1)
		return MemUsage{Used: 1, Limit: 1 << 30}, nil
	}})
	time.Sleep(200 * time.Millisecond)
	if n := reads.Load(); n != 0 {
		t.Fatalf("idle: the guard read the usage %d times, want 0", n)
	}
	r := &run{cfg: Config{ID: "r1"}, ended: make(chan struct{})}
	if err := s.register(r); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for reads.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := reads.Load(); n < 5 {
		t.Fatalf("with a run: %d reads in 2s, want it polling", n)
	}
	close(r.ended)
	time.Sleep(50 * time.Millisecond) // the read in flight, if any
	before := reads.Load()
	time.Sleep(200 * time.Millisecond)
	if n := reads.Load() - before; n != 0 {
		t.Fatalf("after the run ended: %d more reads, want 0", n)
	}
}
