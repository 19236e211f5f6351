package gateway

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rateLimiter is a token bucket per key: rate tokens per second, up to burst. The rate is the whole gateway's:
// with several replicas (replicas, see ReplicaCounter) each keeps its share, rate/N and burst/N rounded down but
// at least one, so that together they admit no more than the rate, whichever replica a client's calls reach.
// Buckets of idle keys are dropped so that the map does not grow with every key ever seen.
type rateLimiter struct {
	rate  float64
	burst float64
	// replicas is how many gateway replicas share the rate now; nil means one.
	replicas func() int
	now      func() time.Time

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

// sharedBy makes l the share of one of replicas() gateway replicas (nil: the only one).
func (l *rateLimiter) sharedBy(replicas func() int) *rateLimiter {
	l.replicas = replicas
	return l
}

// share is this replica's rate and burst now, and the number of replicas they are shared by.
func (l *rateLimiter) share() (rate, burst float64, replicas int) {
	replicas = 1
	if l.replicas != nil {
		replicas = max(l.replicas(), 1)
	}
	return l.rate / float64(replicas), max(math.Floor(l.burst/float64(replicas)), 1), replicas
}

// allow takes a token for key; when none is left it says how long until one is.
func (l *rateLimiter) allow(key string) (ok bool, retryAfter time.Duration) {
	if l == nil || l.rate <= 0 {
		return true, 0
	}
	rate, burst, _ := l.share()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now, rate, burst)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// limitText says what limit applies, and this replica's share of it when there are several.
func (l *rateLimiter) limitText() string {
	rate, burst, n := l.share()
	if n == 1 {
		return fmt.Sprintf("at most %g per second (burst %g)", l.rate, l.burst)
	}
	return fmt.Sprintf("at most %g per second (burst %g) over %d gateway replicas, %g per second (burst %g) on this one",
		l.rate, l.burst, n, rate, burst)
}

// sweep drops full buckets, at most once a minute.
func (l *rateLimiter) sweep(now time.Time, rate, burst float64) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	full := time.Duration(burst / rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full {
			delete(l.buckets, k)
		}
	}
}

// byteBudget bounds the memory that calls in flight may hold: each call reserves its worst case before it
// allocates (its body, its output buffers and the text it returns), so that no mix of calls can outgrow the
// container. One tenant may hold at most perTenant, so that it cannot starve the others. A call that finds
// nothing else reserved is always admitted, so that a budget smaller than one call cannot wedge the gateway.
type byteBudget struct {
	total, perTenant int64
	mu               sync.Mutex
	used             int64
	byTenant         map[string]int64
}

func newByteBudget(total, perTenant int64) *byteBudget {
	return &byteBudget{total: total, perTenant: perTenant, byTenant: map[string]int64{}}
}

// retryAfterBudget is the hint sent with a refusal: calls that hold budget usually end within seconds.
const retryAfterBudget = 2 * time.Second

// reservation is one call's share of a byteBudget; release it exactly once (later calls are no-ops).
type reservation struct {
	b      *byteBudget
	tenant string
	n      int64
}

// reserve takes n bytes for tenant, or answers 429 (the tenant's share is full) or 503 (the gateway's is).
func (b *byteBudget) reserve(tenant string, n int64) (*reservation, *Error) {
	r := &reservation{b: b, tenant: tenant}
	return r, r.resize(n)
}

// resize changes the reservation to n bytes; growing may be refused as reserve is, shrinking never is.
func (r *reservation) resize(n int64) *Error {
	b := r.b
	if b == nil || b.total <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d := n - r.n
	if d > 0 {
		t := b.byTenant[r.tenant] - r.n
		if b.perTenant > 0 && t > 0 && t+n > b.perTenant {
			return &Error{Status: http.StatusTooManyRequests, Code: CodeOutputBudget, RetryAfter: retryAfterBudget,
				Message: fmt.Sprintf("this tenant's calls in flight hold %d MiB of the gateway's memory budget (its share is %d MiB); "+
					"wait for one to finish or ask for a smaller max_output_bytes", t>>20, b.perTenant>>20)}
		}
		if u := b.used - r.n; u > 0 && u+n > b.total {
			return &Error{Status: http.StatusServiceUnavailable, Code: CodeGatewayBusy, RetryAfter: retryAfterBudget,
				Message: "the gateway's memory budget for calls in flight is in use; retry shortly"}
		}
	}
	b.used += d
	if b.byTenant[r.tenant] += d; b.byTenant[r.tenant] <= 0 {
		delete(b.byTenant, r.tenant)
	}
	r.n = n
	return nil
}

func (r *reservation) release() { _ = r.resize(0) }

// Memory costs the budget counts. A stream keeps at most its budget of raw output and returns at most its
// budget of text; JSON escaping is streamed (ndjson.go, writeExecResult), so it costs only callOverhead.
const (
	// callOverhead covers what any call holds whatever its size: the exec transport's buffers and goroutines,
	// the HTTP connection, the streaming JSON encoder's pieces.
	callOverhead = 256 << 10
	// fileChunk is the base64 or body piece a file transfer holds at a time (besides callOverhead).
	fileChunk = 256 << 10
)

// replyCost is what holding a reply of n bytes from a sandbox's PID 1 costs: the frame and what it decodes to.
// A reply is counted before it is read (runwrap.Request.ReserveReply), from the length its header gives.
func replyCost(n int) int64 { return 2 * int64(n) }

// asError is e as an error: nil stays nil (a nil *Error in an error would not).
func asError(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}

// execCost is the most a command with this per-stream budget and stdin can hold.
func execCost(keepBytes, stdinBytes int) int64 {
	return callOverhead + 2*2*int64(keepBytes) + int64(stdinBytes)
}

// bodyCost is the most reading a JSON body can hold: the decoder's buffer and the decoded strings.
func (s *Server) bodyCost(r *http.Request) int64 {
	n := s.opts.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	return callOverhead + 2*n
}

// DefaultMemoryLimit is assumed when the container's memory limit cannot be read (the chart's default).
const DefaultMemoryLimit = 512 << 20

// MemoryLimit is this process's cgroup memory limit (v2 memory.max, else v1 memory.limit_in_bytes), or 0 when
// there is none or it cannot be read.
func MemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) or a page-rounded MaxInt64 (v1) mean no limit.
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0
		}
		return n
	}
	return 0
}

// MemoryPlan splits a memory limit: half for calls in flight (the rest is the process itself, its caches
// and the garbage collector's headroom) and a soft limit for the Go runtime at 90%, so that the collector
// works harder before the kernel's OOM killer would.
func MemoryPlan(limit int64) (inflight, goMemLimit int64) {
	return limit / 2, limit / 10 * 9
}
