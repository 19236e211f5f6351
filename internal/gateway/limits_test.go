package gateway

import (
	"testing"
	"time"
)

func TestRateLimiterTokenBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newRateLimiter(2, 3) // 2/s, burst 3
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.allow("k"); !ok {
			t.Fatalf("burst call %d refused", i)
		}
	}
	ok, retry := l.allow("k")
	if ok || retry <= 0 || retry > 500*time.Millisecond {
		t.Fatalf("4th call: ok=%v retry=%v, want refused with retry <= 500ms", ok, retry)
	}
	if ok, _ := l.allow("other"); !ok {
		t.Fatal("another key must have its own bucket")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow("k"); !ok {
		t.Fatal("a token must be back after 500ms at 2/s")
	}
	if ok, _ := l.allow("k"); ok {
		t.Fatal("only one token came back")
	}
	now = now.Add(time.Hour)
	l.allow("x") // sweeps idle buckets
	if len(l.buckets) != 1 {
		t.Fatalf("idle buckets not swept: %d left", len(l.buckets))
	}
}

// With N replicas a key's bucket on each is rate/N and burst/N rounded down, at least one token: together the
// replicas admit the burst once, not N times, and the share follows the count.
func TestRateLimiterSharesTheRateAcrossReplicas(t *testing.T) {
	now := time.Unix(1000, 0)
	replicas := 3
	l := newRateLimiter(3, 10).sharedBy(func() int { return replicas })
	l.now = func() time.Time { return now }
	admitted := func() int {
		n := 0
		for {
			ok, _ := l.allow("k")
			if !ok {
				return n
			}
			n++
		}
	}
	if n := admitted(); n != 3 {
		t.Fatalf("burst 10 over 3 replicas: this one admitted %d at once, want 3", n)
	}
	if _, retry := l.allow("k"); retry <= 900*time.Millisecond || retry > time.Second {
		t.Fatalf("rate 3/s over 3 replicas: retry after %v, want 1s", retry)
	}
	replicas = 1
	now = now.Add(10 * time.Second)
	if n := admitted(); n != 10 {
		t.Fatalf("the only replica again: admitted %d at once, want the whole burst of 10", n)
	}
	replicas = 20
	now = now.Add(time.Minute)
	if n := admitted(); n != 1 {
		t.Fatalf("burst 10 over 20 replicas: admitted %d at once, want at least 1", n)
	}
	if got, want := l.limitText(), "at most 3 per second (burst 10) over 20 gateway replicas, 0.15 per second (burst 1) on this one"; got != want {
		t.Fatalf("limit text %q, want %q", got, want)
	}
}
