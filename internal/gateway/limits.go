package gateway

import (
	"sync"
	"time"
)

// rateLimiter is a token bucket per key: rate tokens per second, up to burst. Buckets of idle keys are
// dropped so that the map does not grow with every key ever seen.
type rateLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(perSecond float64, burst int) *rateLimiter {
	return &rateLimiter{rate: perSecond, burst: float64(max(burst, 1)), now: time.Now, buckets: map[string]*bucket{}}
}

// allow takes a token for key; when none is left it says how long until one is.
func (l *rateLimiter) allow(key string) (ok bool, retryAfter time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// sweep drops full buckets, at most once a minute.
func (l *rateLimiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full {
			delete(l.buckets, k)
		}
	}
}

// concurrencyLimiter bounds calls in flight per tenant.
type concurrencyLimiter struct {
	max      int
	mu       sync.Mutex
	inFlight map[string]int
}

func newConcurrencyLimiter(limit int) *concurrencyLimiter {
	return &concurrencyLimiter{max: limit, inFlight: map[string]int{}}
}

// acquire returns a release func, or false when the tenant is at its limit.
func (c *concurrencyLimiter) acquire(tenant string) (release func(), ok bool) {
	if c == nil || c.max <= 0 {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight[tenant] >= c.max {
		return nil, false
	}
	c.inFlight[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.inFlight[tenant]--; c.inFlight[tenant] <= 0 {
				delete(c.inFlight, tenant)
			}
		})
	}, true
}
