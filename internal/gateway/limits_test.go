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
