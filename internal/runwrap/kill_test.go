package runwrap

import (
	"context"
	"io"
	"sync"
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

// A reader that goes away must end the command: the call is cancelled (its
// HTTP/2 stream reset) or the whole session breaks.
func TestLostReaderKillsTree(t *testing.T) {
	for _, how := range []string{"call cancelled", "session broken"} {
		t.Run(how, func(t *testing.T) {
			s := sleepers.Unique(t)
			sess := openSession(t, supervisorKey)
			cfg := parseRun(t, "--shell", "sleep "+s+" & yes")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			firstLine := make(chan struct{})
			var once sync.Once
			out := writerFunc(func(p []byte) (int, error) {
				once.Do(func() { close(firstLine) })
				return len(p), nil
			})
			done := make(chan error, 1)
			go func() {
				_, err := sess.Run(ctx, &cfg, nil, out, io.Discard)
				done <- err
			}()
			select {
			case <-firstLine:
			case <-time.After(10 * time.Second):
				t.Fatal("no output")
			}
			if how == "call cancelled" {
				cancel()
			} else {
				_ = sess.conn.Close()
			}
			if err := <-done; err == nil {
				t.Fatal("the run answered after its reader went away")
			}
			sleepers.WaitNone(t, s, 10*time.Second)
			if st := statusOf(t, Request{Config: Config{ID: cfg.ID}, Wait: 5 * time.Second}); !st.Done || st.Trailer == nil || !st.Trailer.StreamLost {
				t.Fatalf("outcome after the reader went away: %+v", st.Trailer)
			}
		})
	}
}

// A stream nobody reads any more (writes block) counts as lost after the
// stall timeout.
func TestStalledReaderKillsTree(t *testing.T) {
	s := sleepers.Unique(t)
	block := make(chan struct{})
	defer close(block)
	out := writerFunc(func(p []byte) (int, error) { <-block; return 0, io.ErrClosedPipe })
	cfg := parseRun(t, "--stall-timeout", "300ms", "--shell", "sleep "+s+" & yes")
	startConfig(t, cfg, out)
	sleepers.WaitCount(t, s, 1)
	sleepers.WaitNone(t, s, 10*time.Second)
	if st := statusOf(t, Request{Config: Config{ID: cfg.ID}, Wait: 5 * time.Second}); !st.Done || st.Trailer == nil || !st.Trailer.StreamLost {
		t.Fatalf("outcome of a stalled stream: %+v", st.Trailer)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
