package runwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
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

// A reader that goes away and does not come back within the run's reattach
// grace ends the command: the call is cancelled (its HTTP/2 stream reset) or
// the whole session breaks.
func TestLostReaderKillsTree(t *testing.T) {
	for _, how := range []string{"call cancelled", "session broken"} {
		t.Run(how, func(t *testing.T) {
			s := sleepers.Unique(t)
			sess := openSession(t, supervisorKey)
			cfg := parseRun(t, "--shell", "sleep "+s+" & yes")
			cfg.ReattachGrace = 300 * time.Millisecond
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

// A session that breaks mid-run loses nothing: the run goes on, and a call on a new session attaches to it by
// id from the bytes it has, and gets the rest of its output exactly and its real outcome. Fails with the run
// killed when its call ends (checked once: the attach found it killed, stream_lost).
func TestReattachAfterTheSessionBreaks(t *testing.T) {
	sess := openSession(t, supervisorKey)
	cfg := parseRun(t, "--shell", `for i in $(seq 1 30); do echo "line $i"; echo "err $i" >&2; sleep 0.05; done; exit 3`)
	var got lockedBuffer
	firstLines := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(p []byte) (int, error) {
		n, _ := got.Write(p)
		if strings.Contains(got.String(), "line 5\n") {
			once.Do(func() { close(firstLines) })
		}
		return n, nil
	})
	var errb lockedBuffer
	done := make(chan error, 1)
	go func() {
		_, err := sess.Run(context.Background(), &cfg, nil, out, &errb)
		done <- err
	}()
	select {
	case <-firstLines:
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
	}
	_ = sess.conn.Close() // the exec stream breaks
	if err := <-done; !errors.Is(err, ErrNoReply) {
		t.Fatalf("the broken call: %v", err)
	}
	have := [2]int64{int64(len(got.String())), int64(len(errb.String()))}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rest, restErr lockedBuffer
	rep, err := openSession(t, supervisorKey).Attach(ctx, cfg.ID, have, &rest, &restErr)
	if err != nil || rep.Error != "" || rep.Trailer == nil || rep.Trailer.ExitCode != 3 || rep.Trailer.StreamLost {
		t.Fatalf("attach: %+v, %v", rep, err)
	}
	var want, wantErr strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if got.String()+rest.String() != want.String() || errb.String()+restErr.String() != wantErr.String() {
		t.Fatalf("output across the break: %q + %q, %q + %q", got.String(), rest.String(), errb.String(), restErr.String())
	}
	if int64(len(want.String())) != rep.Trailer.StdoutBytes {
		t.Fatalf("the outcome counts %d bytes", rep.Trailer.StdoutBytes)
	}
}

// A run whose stdin was still coming when its call broke cannot be made whole by a later call: it ends at once,
// as lost, instead of waiting out the grace.
func TestStdinCutOffEndsTheRun(t *testing.T) {
	s := sleepers.Unique(t)
	sess := openSession(t, supervisorKey)
	cfg := parseRun(t, "--shell", "sleep "+s+" & cat")
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		_, err := sess.Run(context.Background(), &cfg, pr, io.Discard, io.Discard)
		done <- err
	}()
	if _, err := pw.Write([]byte("some input\n")); err != nil {
		t.Fatal(err)
	}
	sleepers.WaitCount(t, s, 1)
	_ = sess.conn.Close()
	<-done
	start := time.Now()
	sleepers.WaitNone(t, s, 5*time.Second)
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the run took %v to end after its stdin was cut off", took)
	}
	if st := statusOf(t, Request{Config: Config{ID: cfg.ID}, Wait: 5 * time.Second}); !st.Done || st.Trailer == nil || !st.Trailer.StreamLost {
		t.Fatalf("outcome: %+v", st.Trailer)
	}
}
