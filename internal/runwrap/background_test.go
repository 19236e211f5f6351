package runwrap

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/sleepers"
)

func startBackground(t *testing.T, shell string, timeout time.Duration) ProcInfo {
	t.Helper()
	cfg := Config{ID: nextID(), Keep: DefaultKeep, Grace: 200 * time.Millisecond,
		Timeout: timeout, Shell: shell, OutDir: t.TempDir(), Background: true}
	rep := ctl(t, &Request{Op: OpRun, Config: cfg})
	if rep.Error != "" || rep.Process == nil || !rep.Process.Running || rep.Process.PID == 0 || rep.Process.StdoutPath == "" {
		t.Fatalf("background start: %+v", rep)
	}
	return *rep.Process
}

// waitOutput polls the run's output until stdout contains want.
func waitOutput(t *testing.T, id, want string) Output {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rep := ctl(t, &Request{Op: OpOutput, Config: Config{ID: id}})
		if rep.Error != "" || rep.Output == nil {
			t.Fatalf("output: %+v", rep)
		}
		if strings.Contains(string(rep.Output.Stdout), want) {
			return *rep.Output
		}
		if time.Now().After(end) {
			t.Fatalf("stdout never held %q: %q", want, rep.Output.Stdout)
		}
	}
}

// A background run answers at once, keeps running after its client is
// gone, takes stdin, reads back from offsets, and is listed.
func TestBackgroundRunStdinOutput(t *testing.T) {
	start := time.Now()
	p := startBackground(t, `echo ready; while read -r line; do echo "got $line"; echo "err $line" >&2; done; echo bye`, 0)
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("start took %v", el)
	}
	o := waitOutput(t, p.ID, "ready\n")
	if rep := ctl(t, &Request{Op: OpStdin, Config: Config{ID: p.ID}, Data: []byte("one\ntwo\n")}); rep.Error != "" {
		t.Fatalf("stdin: %+v", rep)
	}
	waitOutput(t, p.ID, "got two\n")
	rep := ctl(t, &Request{Op: OpOutput, Config: Config{ID: p.ID}, StdoutOffset: int64(len(o.Stdout))})
	if got := string(rep.Output.Stdout); got != "got one\ngot two\n" || string(rep.Output.Stderr) != "err one\nerr two\n" {
		t.Fatalf("output from offset %d: stdout %q stderr %q", len(o.Stdout), got, rep.Output.Stderr)
	}
	list := ctl(t, &Request{Op: OpList})
	found := false
	for _, q := range list.Processes {
		found = found || q.ID == p.ID && q.Running && q.Background
	}
	if !found {
		t.Fatalf("%s not listed as running: %+v", p.ID, list.Processes)
	}
	if rep := ctl(t, &Request{Op: OpStdin, Config: Config{ID: p.ID}, EOF: true}); rep.Error != "" {
		t.Fatalf("close stdin: %+v", rep)
	}
	st := statusOf(t, Request{Config: Config{ID: p.ID}, Wait: 5 * time.Second})
	if !st.Done || st.Trailer == nil || st.Trailer.ExitCode != 0 || st.Trailer.StdoutBytes != int64(len("ready\ngot one\ngot two\nbye\n")) {
		t.Fatalf("after EOF on stdin: %+v", st.Trailer)
	}
	if rep := ctl(t, &Request{Op: OpStdin, Config: Config{ID: p.ID}, Data: []byte("x")}); rep.Error == "" {
		t.Fatal("stdin of an ended process accepted")
	}
}

// Signal reaches the tree; kill ends it with outcome killed and leaves
// nothing, also once the command killed its keeper.
func TestBackgroundSignalAndKill(t *testing.T) {
	p := startBackground(t, `trap 'echo usr1' USR1; echo ready; while :; do sleep 0.05; done`, 0)
	waitOutput(t, p.ID, "ready\n")
	if rep := ctl(t, &Request{Op: OpSignal, Config: Config{ID: p.ID}, Signal: "SIGUSR1"}); rep.Error != "" {
		t.Fatalf("signal: %+v", rep)
	}
	waitOutput(t, p.ID, "usr1\n")
	if rep := ctl(t, &Request{Op: OpSignal, Config: Config{ID: p.ID}, Signal: "SIGNOPE"}); rep.Error == "" {
		t.Fatal("an unknown signal was accepted")
	}
	ctl(t, &Request{Op: OpKill, Config: Config{ID: p.ID}})
	st := statusOf(t, Request{Config: Config{ID: p.ID}, Wait: 5 * time.Second})
	if !st.Done || st.Trailer == nil || !st.Trailer.Killed || st.Trailer.StreamLost {
		t.Fatalf("after kill: %+v", st.Trailer)
	}

	s := sleepers.Unique(t)
	p = startBackground(t, "sleep "+s+" & setsid sleep "+s, 0)
	sleepers.WaitCount(t, s, 2)
	if err := killPID(keeperOf(t, s)); err != nil {
		t.Fatal(err)
	}
	ctl(t, &Request{Op: OpKill, Config: Config{ID: p.ID}})
	st = statusOf(t, Request{Config: Config{ID: p.ID}, Wait: 5 * time.Second})
	if !st.Done || st.Trailer == nil || !st.Trailer.Killed {
		t.Fatalf("kill after the keeper died: %+v", st.Trailer)
	}
	sleepers.WaitNone(t, s, time.Second)
}

// A background run's timeout holds like a foreground one's.
func TestBackgroundTimeout(t *testing.T) {
	s := sleepers.Unique(t)
	p := startBackground(t, "sleep "+s, 500*time.Millisecond)
	st := statusOf(t, Request{Config: Config{ID: p.ID}, Wait: 5 * time.Second})
	if !st.Done || st.Trailer == nil || !st.Trailer.TimedOut {
		t.Fatalf("background timeout: %+v", st.Trailer)
	}
	sleepers.WaitNone(t, s, time.Second)
}

func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// A background command that cannot start is a process that ended at once, with the shell's 127 and why.
func TestBackgroundStartFailure(t *testing.T) {
	cfg := Config{ID: nextID(), Keep: DefaultKeep, Argv: []string{"./no-such-program-airlock"}, OutDir: t.TempDir(), Background: true}
	rep := ctl(t, &Request{Op: OpRun, Config: cfg})
	if rep.Error != "" || rep.Process == nil || rep.Process.Running || rep.Trailer == nil || rep.Trailer.ExitCode != 127 || rep.Trailer.StartError == "" {
		t.Fatalf("%+v (process %+v)", rep, rep.Process)
	}
}
