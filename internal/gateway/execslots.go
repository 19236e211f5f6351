package gateway

import (
	"fmt"
	"net/http"
	"sync"

	"airlock.dev/airlock/internal/gateway/auth"
)

// execSlots admits exec streams, the pods/exec requests behind commands and file transfers: per tenant up to
// perTenant, and over all tenants up to total. The total protects the API server and the kubelets: an exec
// stream is a long-running request, which API Priority and Fairness does not limit. Both limits are the whole
// gateway's: with several replicas each admits its share (share), so that no API write is needed per call.
type execSlots struct {
	perTenant, total int
	// replicas is how many gateway replicas share the limits now (see ReplicaCounter); nil means one.
	replicas func() int

	mu       sync.Mutex
	all      int
	inFlight map[string]int
}

// DefaultMaxExecStreams is the default gateway-wide cap (all replicas together): five tenants at the
// default per-tenant limit of 20. The e2e benchmark BenchmarkCreateReadyUnderExecFlood measures creates
// during a 50-way flood (docs/performance.md).
const DefaultMaxExecStreams = 100

func newExecSlots(perTenant, total int, replicas func() int) *execSlots {
	return &execSlots{perTenant: perTenant, total: total, replicas: replicas, inFlight: map[string]int{}}
}

// share is one replica's part of a limit that replicas share. It is rounded up, so that every replica admits
// at least one call and the replicas together admit at most limit+replicas-1 (exactly limit when replicas
// divides it); rounding down could starve a tenant whose limit is below the replica count. A limit <= 0 is
// no limit and stays so.
func share(limit, replicas int) int {
	if limit <= 0 {
		return limit
	}
	replicas = max(replicas, 1)
	return (limit + replicas - 1) / replicas
}

// acquire takes a slot for tenant and returns its release (later calls are no-ops), or the 429 refusing it.
func (s *execSlots) acquire(tenant string) (release func(), e *Error) {
	n := 1
	if s.replicas != nil {
		n = max(s.replicas(), 1)
	}
	perTenant, total := share(s.perTenant, n), share(s.total, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if perTenant > 0 && s.inFlight[tenant] >= perTenant {
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeTooManyExecs, RetryAfter: retryAfterBudget,
			Message: "too many commands and file transfers in flight for this tenant (" + limitText(s.perTenant, perTenant, n) +
				"); wait for one to finish"}
	}
	if total > 0 && s.all >= total {
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeTooManyStreams, RetryAfter: retryAfterBudget,
			Message: "the gateway is at its limit of exec streams over all tenants (" + limitText(s.total, total, n) + "); retry shortly"}
	}
	s.all++
	s.inFlight[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.all--
			if s.inFlight[tenant]--; s.inFlight[tenant] <= 0 {
				delete(s.inFlight, tenant)
			}
		})
	}, nil
}

// limitText says what limit applies, and this replica's share of it when there are several.
func limitText(limit, share, replicas int) string {
	if replicas == 1 {
		return fmt.Sprintf("limit %d", limit)
	}
	return fmt.Sprintf("limit %d over %d gateway replicas, %d on this one", limit, replicas, share)
}

// acquireExec takes the caller's exec slot, counting refusals.
func (s *Server) acquireExec(p auth.Principal) (func(), *Error) {
	release, e := s.execs.acquire(p.Tenant)
	if e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
	}
	return release, e
}
