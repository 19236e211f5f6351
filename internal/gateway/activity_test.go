package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// patchLog is a fake status patch: it records each write, and fails with err while err is set.
type patchLog struct {
	mu     sync.Mutex
	writes []activityWrite
	err    error
	notify chan activityWrite
}

type activityWrite struct {
	key    types.NamespacedName
	at, on time.Time // the activity written, and when it was written
}

func (p *patchLog) patch(clk *clocktesting.FakeClock) func(context.Context, types.NamespacedName, time.Time) error {
	return func(_ context.Context, key types.NamespacedName, at time.Time) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		w := activityWrite{key, at, clk.Now()}
		p.writes = append(p.writes, w)
		if p.notify != nil {
			p.notify <- w
		}
		return p.err
	}
}

func (p *patchLog) all() []activityWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]activityWrite(nil), p.writes...)
}

var sbxA = types.NamespacedName{Namespace: "t", Name: "a"}

func newTestActivity(interval time.Duration) (*Activity, *clocktesting.FakeClock, *patchLog) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	p := &patchLog{}
	return newActivity(p.patch(clk), interval, clk, logr.Discard()), clk, p
}

// One touch a second for 95 s with a 30 s interval: the first is written at once, then at most one write per
// interval, each with the latest activity, and the last touch is written an interval after the previous write:
// ceil(95/30)+1 = 5 writes for 96 touches.
func TestActivityCoalescesTouches(t *testing.T) {
	const interval = 30 * time.Second
	a, clk, p := newTestActivity(interval)
	ctx := context.Background()
	start := clk.Now()
	for i := 0; i <= 95; i++ {
		a.Touch(sbxA.Namespace, sbxA.Name)
		a.flush(ctx)
		clk.Step(time.Second)
	}
	last := start.Add(95 * time.Second)
	next := a.flush(ctx)
	if want := start.Add(120 * time.Second); !next.Equal(want) {
		t.Fatalf("next write due %v, want %v (an interval after the previous one)", next, want)
	}
	clk.SetTime(next)
	if a.flush(ctx); len(p.all()) != 5 {
		t.Fatalf("%d writes for 96 touches over 95 s, want ceil(95/30)+1 = 5: %v", len(p.all()), p.all())
	}
	ws := p.all()
	if !ws[0].at.Equal(start) || !ws[0].on.Equal(start) {
		t.Errorf("first activity written %v at %v, want at once", ws[0].at, ws[0].on)
	}
	for i := 1; i < len(ws); i++ {
		if gap := ws[i].on.Sub(ws[i-1].on); gap < interval {
			t.Errorf("writes %d and %d only %v apart", i-1, i, gap)
		}
		if ws[i].at.Before(ws[i-1].at) {
			t.Errorf("activity went back from %v to %v", ws[i-1].at, ws[i].at)
		}
	}
	if got := ws[len(ws)-1].at; !got.Equal(last) {
		t.Errorf("last write says %v, want the last touch %v", got, last)
	}
	// Quiet since: nothing more is written and the entry is dropped.
	clk.Step(time.Hour)
	if next := a.flush(ctx); !next.IsZero() || len(p.all()) != 5 || len(a.entries) != 0 {
		t.Errorf("after a quiet hour: next %v, %d writes, %d entries", next, len(p.all()), len(a.entries))
	}
}

// A call in flight renews its sandbox every interval until it ends; its end is activity too.
func TestActivityRenewsWhileBusy(t *testing.T) {
	const interval = 30 * time.Second
	a, clk, p := newTestActivity(interval)
	ctx := context.Background()
	start := clk.Now()
	end := a.Begin(sbxA.Namespace, sbxA.Name)
	a.flush(ctx)
	for range 3 {
		clk.Step(interval)
		a.flush(ctx)
	}
	clk.Step(5 * time.Second)
	end()
	end() // a second end changes nothing
	clk.Step(interval)
	a.flush(ctx)
	clk.Step(interval)
	a.flush(ctx)
	var ats []time.Duration
	for _, w := range p.all() {
		ats = append(ats, w.at.Sub(start))
	}
	want := []time.Duration{0, interval, 2 * interval, 3 * interval, 3*interval + 5*time.Second}
	if len(ats) != len(want) {
		t.Fatalf("activity written at %v, want %v", ats, want)
	}
	for i := range want {
		if ats[i] != want[i] {
			t.Fatalf("activity written at %v, want %v", ats, want)
		}
	}
}

// A failed write is retried an interval later; a sandbox that is gone is forgotten.
func TestActivityRetriesAndForgets(t *testing.T) {
	const interval = 30 * time.Second
	a, clk, p := newTestActivity(interval)
	ctx := context.Background()
	p.err = errors.New("api server unavailable")
	a.Touch(sbxA.Namespace, sbxA.Name)
	if next := a.flush(ctx); !next.Equal(clk.Now().Add(interval)) {
		t.Fatalf("retry due %v, want an interval later", next)
	}
	p.err = nil
	clk.Step(interval)
	a.flush(ctx)
	if ws := p.all(); len(ws) != 2 || !ws[1].at.Equal(ws[0].at) {
		t.Fatalf("writes %v, want the same activity written again", ws)
	}

	p.err = apierrors.NewNotFound(schema.GroupResource{Resource: "sandboxes"}, sbxA.Name)
	clk.Step(time.Second)
	end := a.Begin(sbxA.Namespace, sbxA.Name)
	clk.Step(interval)
	a.flush(ctx)
	if len(a.entries) != 0 {
		t.Fatalf("gone sandbox still tracked: %d entries", len(a.entries))
	}
	end()
	if len(a.entries) != 0 {
		t.Fatal("the end of a call on a gone sandbox brought it back")
	}
}

// Run writes the first touch at once, then sleeps until the next write is due.
func TestActivityRun(t *testing.T) {
	const interval = 30 * time.Second
	a, clk, p := newTestActivity(interval)
	p.notify = make(chan activityWrite, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wait := func() activityWrite {
		t.Helper()
		select {
		case w := <-p.notify:
			return w
		case <-time.After(5 * time.Second):
			t.Fatal("no write")
		}
		return activityWrite{}
	}
	a.Touch(sbxA.Namespace, sbxA.Name)
	first := wait()
	clk.Step(time.Second)
	a.Touch(sbxA.Namespace, sbxA.Name)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case w := <-p.notify:
		t.Fatalf("written again before the interval: %v", w)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(interval)
	if w := wait(); w.on.Sub(first.on) < interval || !w.at.Equal(first.at.Add(time.Second)) {
		t.Fatalf("second write %v after %v", w, first)
	}
}

func TestActivityNilRecordsNothing(t *testing.T) {
	var a *Activity
	a.Touch("t", "a")
	a.Begin("t", "a")()
}
