package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// DefaultActivityFlushInterval is how often, at most, the gateway writes one sandbox's status.lastActivityAt.
const DefaultActivityFlushInterval = 30 * time.Second

// activityPatchTimeout bounds one status patch, so that a slow API server delays the next flush, not forever.
const activityPatchTimeout = 10 * time.Second

// Activity records when each sandbox was last used and writes that to its status.lastActivityAt, from which
// the controller alone decides idle expiry (spec.idleTimeout). Calls never wait for the write: activity is kept
// in memory and patched at most once per sandbox per interval, so a burst of commands costs one API write.
//
// The first activity after a quiet interval is written at once; later ones at most an interval after the
// previous write. Recorded activity therefore lags the real one by at most the interval, and as long as the
// idle timeout is longer than twice the interval no activity reaches the API server after the deadline it
// would have moved. A sandbox with calls in flight (Begin) is renewed every interval until they end, so a
// command longer than the idle timeout does not see its sandbox expire under it.
//
// Each gateway replica records its own calls: N replicas may each write once per interval. What is pending when
// the gateway stops is not written; that costs at most an interval of idle time.
//
// Callers: exec and file transfers (Begin, in runCommand and admitFile). Anything else that keeps a sandbox in
// use calls Touch; background processes that run with no call in flight are to be renewed that way (issue 9).
type Activity struct {
	patch    func(ctx context.Context, key types.NamespacedName, at time.Time) error
	clock    clock.Clock
	interval time.Duration
	log      logr.Logger
	// kick wakes Run when a sandbox becomes pending, which may be before the write it was sleeping for.
	kick chan struct{}

	mu      sync.Mutex
	entries map[types.NamespacedName]*activityEntry
}

// activityEntry is one sandbox's activity.
type activityEntry struct {
	last      time.Time // latest activity seen
	recorded  time.Time // the activity last written (zero: none, or the write failed)
	patchedAt time.Time // when it was written (zero: never)
	busy      int       // calls in flight
}

// pending says whether the entry has something to write.
func (e *activityEntry) pending() bool { return e.busy > 0 || e.last.After(e.recorded) }

// NewActivity records activity with c, writing each sandbox's at most once per interval; Run does the writing.
func NewActivity(c client.Client, interval time.Duration, clk clock.Clock, log logr.Logger) (*Activity, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("activity flush interval must be positive, got %s", interval)
	}
	return newActivity(patchLastActivity(c), interval, clk, log), nil
}

func newActivity(patch func(context.Context, types.NamespacedName, time.Time) error, interval time.Duration, clk clock.Clock, log logr.Logger) *Activity {
	return &Activity{patch: patch, clock: clk, interval: interval, log: log, kick: make(chan struct{}, 1),
		entries: map[types.NamespacedName]*activityEntry{}}
}

// patchLastActivity writes status.lastActivityAt with a merge patch: it touches no other field, so it cannot
// undo the controller's status, and the controller's own writes (updates with a resourceVersion) conflict and
// retry instead of undoing it.
func patchLastActivity(c client.Client) func(context.Context, types.NamespacedName, time.Time) error {
	return func(ctx context.Context, key types.NamespacedName, at time.Time) error {
		body, err := json.Marshal(map[string]any{"status": map[string]any{"lastActivityAt": metav1.NewTime(at)}})
		if err != nil {
			return fmt.Errorf("encoding activity of sandbox %s: %w", key, err)
		}
		ctx, cancel := context.WithTimeout(ctx, activityPatchTimeout)
		defer cancel()
		sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := c.Status().Patch(ctx, sb, client.RawPatch(types.MergePatchType, body)); err != nil {
			return fmt.Errorf("recording activity of sandbox %s: %w", key, err)
		}
		return nil
	}
}

// Touch records activity on a sandbox now. A nil *Activity records nothing (idle expiry then sees no activity).
func (a *Activity) Touch(namespace, name string) {
	if a == nil {
		return
	}
	a.mark(types.NamespacedName{Namespace: namespace, Name: name}, 0)
}

// Begin records activity and keeps the sandbox active until the returned end is called (once is enough; more
// calls do nothing).
func (a *Activity) Begin(namespace, name string) (end func()) {
	if a == nil {
		return func() {}
	}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	a.mark(key, 1)
	var once sync.Once
	return func() { once.Do(func() { a.mark(key, -1) }) }
}

func (a *Activity) mark(key types.NamespacedName, busy int) {
	now := a.clock.Now()
	a.mu.Lock()
	e := a.entries[key]
	if e == nil {
		if busy < 0 {
			// Dropped while busy: the sandbox is gone (its write was NotFound).
			a.mu.Unlock()
			return
		}
		e = &activityEntry{}
		a.entries[key] = e
	}
	wasPending := e.pending()
	e.last, e.busy = now, e.busy+busy
	a.mu.Unlock()
	if !wasPending {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// Run writes recorded activity until ctx ends.
func (a *Activity) Run(ctx context.Context) {
	for {
		next := a.flush(ctx)
		var timer clock.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = a.clock.NewTimer(next.Sub(a.clock.Now()))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-a.kick:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// flush writes the activity of every sandbox whose interval since its last write has passed and returns when
// the next one is due (zero if nothing is pending). Entries quiet for an interval are dropped: a new touch of
// theirs is written at once either way.
func (a *Activity) flush(ctx context.Context) time.Time {
	type write struct {
		key types.NamespacedName
		at  time.Time
	}
	now := a.clock.Now()
	var due []write
	var next time.Time
	a.mu.Lock()
	for key, e := range a.entries {
		ready := e.patchedAt.Add(a.interval)
		switch {
		case e.pending() && !now.Before(ready):
			at := e.last
			if e.busy > 0 {
				at = now
				next = earliest(next, now.Add(a.interval))
			}
			e.recorded, e.patchedAt = at, now
			due = append(due, write{key, at})
		case e.pending():
			next = earliest(next, ready)
		case !now.Before(ready):
			delete(a.entries, key)
		}
	}
	a.mu.Unlock()
	for _, w := range due {
		if err := a.patch(ctx, w.key, w.at); err != nil {
			if a.failed(w.key, err) {
				next = earliest(next, now.Add(a.interval))
			}
		}
	}
	return next
}

// failed handles a write that did not happen and says whether it is to be retried (an interval later, like
// any write). A sandbox that is gone is forgotten.
func (a *Activity) failed(key types.NamespacedName, err error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if apierrors.IsNotFound(err) {
		delete(a.entries, key)
		return false
	}
	if !errors.Is(err, context.Canceled) {
		a.log.Error(err, "recording sandbox activity; retrying", "sandbox", key, "interval", a.interval)
	}
	if e := a.entries[key]; e != nil {
		e.recorded = time.Time{}
	}
	return true
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
