package gateway

import (
	"crypto/rand"
	"net/http"
	"sync"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
)

// An /mcp POST is one MCP call (or, before protocol 2025-06-18, a batch of them). The SDK reads it whole and
// decodes it several times over, runs the tools after the POST's handler has handed the request on, and
// encodes each result (its text and its structured content, escaped) after the tool has returned. So the
// memory of a POST is held by an mcpCall from its arrival until its answer is written: the request's
// (mcpBodyCopies of its body), then each result's (mcpResultCost), handed over by the tool that made it.

// mcpCallHeader carries a POST's call token to its tool calls (in CallToolRequest.Extra.Header). The gateway
// removes any the client sends.
const mcpCallHeader = "Airlock-Internal-Mcp-Call"

// Measured with the SDK v1.8.0 (peak heap over the bytes): a request is held about six times over while it is
// read, checked against the tool's schema and decoded, and a result about five times its JSON.
const (
	mcpBodyCopies   = 6
	mcpResultCopies = 5
)

// mcpCalls are the /mcp POSTs in flight, by token.
type mcpCalls struct {
	mu sync.Mutex
	m  map[string]*mcpCall
}

func newMCPCalls() *mcpCalls { return &mcpCalls{m: map[string]*mcpCall{}} }

// mcpCall is one POST's memory: what it holds until end.
type mcpCall struct {
	calls  *mcpCalls
	token  string
	tenant string
	mu     sync.Mutex
	ended  bool
	held   []*reservation
}

// beginMCPCall reserves a POST's request memory (the whole body limit when its length is unknown) and
// registers it for its tool calls.
func (s *Server) beginMCPCall(p auth.Principal, r *http.Request) (*mcpCall, *Error) {
	n := s.opts.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	mem, e := s.reserve(p, callOverhead+mcpBodyCopies*n)
	if e != nil {
		return nil, e
	}
	c := &mcpCall{calls: s.mcpCalls, token: rand.Text(), tenant: p.Tenant, held: []*reservation{mem}}
	s.mcpCalls.mu.Lock()
	s.mcpCalls.m[c.token] = c
	s.mcpCalls.mu.Unlock()
	return c, nil
}

// lookup is the POST a tool call belongs to, if it is still in flight and the caller's tenant's.
func (cs *mcpCalls) lookup(token, tenant string) *mcpCall {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.m[token]; c != nil && c.tenant == tenant {
		return c
	}
	return nil
}

// hold makes mem the POST's until its end; false (mem untouched) when the POST has ended: its answer is gone.
func (c *mcpCall) hold(mem *reservation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	c.held = append(c.held, mem)
	return true
}

// end releases what the POST holds, once its answer is written or its client gone.
func (c *mcpCall) end() {
	c.calls.mu.Lock()
	delete(c.calls.m, c.token)
	c.calls.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	for _, mem := range c.held {
		mem.release()
	}
	c.held = nil
}

// mcpResultCost is what a tool result holds while it is encoded, for these texts: each appears twice, as text
// and as structured content, counted as JSON.
func mcpResultCost(texts ...string) int64 {
	n := int64(0)
	for _, t := range texts {
		n += int64(mcpserver.JSONTextLen(t))
	}
	return callOverhead + mcpResultCopies*2*n
}
