package runwrap

import (
	"bufio"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/sleepers"
)

func TestTimeoutKillsWholeTree(t *testing.T) {
	a, b, c := sleepers.Unique(t), sleepers.Unique(t), sleepers.Unique(t)
	// A background child, one that escapes the group with setsid, and the
	// foreground one.
	r := runWrapper(t, nil, "--timeout", "500ms", "--grace", "300ms", "--shell",
		"sleep "+a+" & setsid sleep "+b+" & sleep "+c)
	if !r.trailer.TimedOut || r.code != ExitTimeout {
		t.Fatalf("want timeout: %+v code %d", r.trailer, r.code)
	}
	if r.elapsed > 5*time.Second {
		t.Fatalf("took %v", r.elapsed)
	}
	for _, s := range []string{a, b, c} {
		sleepers.WaitNone(t, s, time.Second)
	}
}

func TestTimeoutEscalatesToSIGKILL(t *testing.T) {
	s := sleepers.Unique(t)
	r := runWrapper(t, nil, "--timeout", "300ms", "--grace", "300ms", "--shell",
		"trap '' TERM; sleep "+s+"; echo survived")
	if !r.trailer.TimedOut || r.stdout != "" {
		t.Fatalf("%+v stdout %q", r.trailer, r.stdout)
	}
	sleepers.WaitNone(t, s, time.Second)
}

func TestLeftoversKilledAfterExit(t *testing.T) {
	s := sleepers.Unique(t)
	r := runWrapper(t, nil, "--shell", "(setsid sleep "+s+" >/dev/null 2>&1 &); echo started")
	if r.trailer.ExitCode != 0 || r.trailer.LeftoversKilled < 1 || r.stdout != "started\n" {
		t.Fatalf("%+v %q", r.trailer, r.stdout)
	}
	sleepers.WaitNone(t, s, time.Second)
}

func TestKeepLeftovers(t *testing.T) {
	s := sleepers.Unique(t)
	r := runWrapper(t, nil, "--keep-leftovers", "--shell", "(setsid sleep "+s+" >/dev/null 2>&1 &); echo started")
	if r.trailer.ExitCode != 0 || r.trailer.LeftoversKilled != 0 || r.elapsed > 3*time.Second {
		t.Fatalf("%+v in %v", r.trailer, r.elapsed)
	}
	sleepers.WaitCount(t, s, 1) // it may still be exec'ing
	time.Sleep(100 * time.Millisecond)
	if pids := sleepers.List(s); len(pids) != 1 {
		t.Fatalf("kept process missing: %v", pids)
	}
}

// A reader that goes away (EPIPE) must end the command.
func TestBrokenStdoutKillsTree(t *testing.T) {
	s := sleepers.Unique(t)
	cmd := wrapperCmd(t, "--shell", "sleep "+s+" & yes")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_ = pr.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("wrapper did not end after its stdout broke")
	}
	sleepers.WaitNone(t, s, time.Second)
}

// A stream nobody reads any more (writes block) counts as lost after the
// stall timeout.
func TestStalledStdoutKillsTree(t *testing.T) {
	s := sleepers.Unique(t)
	cmd := wrapperCmd(t, "--stall-timeout", "300ms", "--shell", "sleep "+s+" & yes")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close() // open but never read: writes block once the pipe is full
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = pw, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		t.Logf("wrapper ended %v after start", time.Since(start))
		if strings.Contains(stderr.String(), testNonce) {
			t.Fatalf("no trailer expected on a lost stream: %q", stderr.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("wrapper did not give up on a stalled stream")
	}
	sleepers.WaitNone(t, s, time.Second)
}
