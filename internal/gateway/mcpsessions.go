package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/internal/gateway/auth"
)

// MCP sessions live in the replica that opened them (the SDK's transport, a server, goroutines and a timer
// each) until the client ends them, they idle out (--mcp-session-timeout) or the gateway stops. A tenant may
// hold MaxMCPSessionsPerTenant of them on a replica and all tenants MaxMCPSessions, each counted in the
// memory budget: a flood of initialize requests gets 429 with Retry-After instead of the gateway's memory.

// Defaults of the session bounds, per replica.
const (
	DefaultMaxMCPSessionsPerTenant = 64
	DefaultMaxMCPSessions          = 1024
	// mcpSessionCost is a session's share of the memory budget: the SDK's state for it (measured with v1.8.0:
	// 12 KiB of heap and a goroutine) with room for its streams.
	mcpSessionCost = 64 << 10
	// retryAfterSession is the hint sent with a refusal; sessions end when their clients end them or idle out.
	retryAfterSession = 10 * time.Second
	// CodeTooManySessions refuses a new MCP session.
	CodeTooManySessions = "too_many_mcp_sessions"
)

// mcpSessionSlots count the sessions of this replica, per tenant and in all.
type mcpSessionSlots struct {
	perTenant, total int
	mu               sync.Mutex
	all              int
	byTenant         map[string]int
}

func newMCPSessionSlots(perTenant, total int) *mcpSessionSlots {
	return &mcpSessionSlots{perTenant: perTenant, total: total, byTenant: map[string]int{}}
}

// acquire takes a session slot for tenant and returns its release (later calls are no-ops), or the 429.
func (l *mcpSessionSlots) acquire(tenant string) (func(), *Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perTenant > 0 && l.byTenant[tenant] >= l.perTenant {
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeTooManySessions, RetryAfter: retryAfterSession,
			Message: fmt.Sprintf("this tenant has %d MCP sessions open on this gateway replica, its limit: end one (DELETE /mcp) or wait until one idles out", l.perTenant)}
	}
	if l.total > 0 && l.all >= l.total {
		return nil, &Error{Status: http.StatusTooManyRequests, Code: CodeTooManySessions, RetryAfter: retryAfterSession,
			Message: fmt.Sprintf("this gateway replica has %d MCP sessions open, its limit over all tenants; retry later", l.total)}
	}
	l.all++
	l.byTenant[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.all--
			if l.byTenant[tenant]--; l.byTenant[tenant] <= 0 {
				delete(l.byTenant, tenant)
			}
		})
	}, nil
}

// openMCPSession takes the caller's session slot and the session's memory; release gives both back.
func (s *Server) openMCPSession(p auth.Principal) (release func(), e *Error) {
	slot, e := s.mcpSlots.acquire(p.Tenant)
	if e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
		return nil, e
	}
	mem, e := s.reserve(p, mcpSessionCost)
	if e != nil {
		slot()
		return nil, e
	}
	return func() { mem.release(); slot() }, nil
}

// holdWhileLive calls release when the session srv got ends, or now if it got none (initialize failed, or the
// request was no initialize: the SDK then closes the session it made for it).
func holdWhileLive(srv *mcp.Server, release func()) {
	for ss := range srv.Sessions() {
		go func() {
			_ = ss.Wait()
			release()
		}()
		return
	}
	release()
}

type sessionServerKey struct{}

// withSessionServer passes a new session's server to the SDK's getServer.
func withSessionServer(ctx context.Context, srv *mcp.Server) context.Context {
	return context.WithValue(ctx, sessionServerKey{}, srv)
}

func sessionServerFrom(ctx context.Context) *mcp.Server {
	srv, _ := ctx.Value(sessionServerKey{}).(*mcp.Server)
	return srv
}
