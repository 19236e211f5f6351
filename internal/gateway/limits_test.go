package gateway

import (
	"sync"
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

func TestConcurrencyLimiter(t *testing.T) {
	c := newConcurrencyLimiter(20)
	var mu sync.Mutex
	var releases []func()
	var wg sync.WaitGroup
	granted := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rel, ok := c.acquire("t1"); ok {
				mu.Lock()
				granted++
				releases = append(releases, rel)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 20 {
		t.Fatalf("granted %d of 50, want exactly 20", granted)
	}
	if _, ok := c.acquire("t2"); !ok {
		t.Fatal("another tenant must not share the limit")
	}
	releases[0]()
	releases[0]() // double release is harmless
	if _, ok := c.acquire("t1"); !ok {
		t.Fatal("a released slot must be reusable")
	}
	if _, ok := c.acquire("t1"); ok {
		t.Fatal("double release freed two slots")
	}
}
