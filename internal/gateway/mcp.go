package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
	"airlock.dev/airlock/pkg/client"
)

// DefaultMCPSessionTimeout is how long an MCP session may be idle before it ends (and its sandbox is deleted).
const DefaultMCPSessionTimeout = 30 * time.Minute

// mcpHandler serves the Model Context Protocol at /mcp (docs/mcp.md). The tools call the service layer as
// the caller (mcpbackend.go), so that tenancy, quotas, rates, exec slots, the memory budget, audit, activity and
// masking are exactly the REST API's. Every POST holds the memory of its request and of its results until its
// answer is written (mcpcalls.go); sessions are bounded per tenant and in all (mcpsessions.go).
func (s *Server) mcpHandler() http.Handler {
	s.mcpSessions = mcpserver.NewSessions(s.opts.Logger.WithName("mcp"))
	s.mcpCalls = newMCPCalls()
	s.mcpSlots = newMCPSessionSlots(s.opts.MaxMCPSessionsPerTenant, s.opts.MaxMCPSessions)
	shared := mcpserver.NewServer(mcpserver.Options{Backend: s.mcpBackend, Sessions: s.mcpSessions})
	h := mcpserver.NewHTTPHandler(func(r *http.Request) *mcp.Server {
		if srv := sessionServerFrom(r.Context()); srv != nil {
			return srv // a new session's, made by serveMCP
		}
		if r.Header.Get("Mcp-Session-Id") != "" {
			return shared // an existing session has its server already; this one only answers the version check
		}
		return s.newMCPServer(r) // sessionless: one per request
	}, mcp.StreamableHTTPOptions{
		SessionTimeout: s.opts.MCPSessionTimeout,
		// A request is held in memory several times over as the SDK decodes it (mcpBodyCopies): write_file's
		// content is bounded like a JSON body, not like an upload (PUT /files takes large files).
		MaxRequestBodyBytes: s.opts.MaxBodyBytes,
	})
	return mcpauth.RequireBearerToken(s.verifyMCPKey, &mcpauth.RequireBearerTokenOptions{
		AllowMissingExpiration: true, // API keys do not expire; they are revoked
	})(s.serveMCP(h))
}

// newMCPServer is the MCP server of a new session or a sessionless request: its sandbox is made as the URL's
// query asks (?template=&size=&network=).
func (s *Server) newMCPServer(r *http.Request) *mcp.Server {
	q := r.URL.Query()
	return mcpserver.NewServer(mcpserver.Options{Backend: s.mcpBackend, Sessions: s.mcpSessions,
		Create: client.CreateOptions{Template: q.Get("template"), Size: q.Get("size"), Network: q.Get("network")}})
}

// serveMCP runs after authentication: only an authenticated caller's connection outlives the server's
// timeouts, holds memory or opens a session.
func (s *Server) serveMCP(next http.Handler) http.Handler {
	// A tool call may run a command as long as an exec may; a session's GET stream lasts the session.
	longest := max(s.opts.MaxExecTimeout, s.opts.MCPSessionTimeout) + execDeadlineSlack
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := mcpPrincipal(mcpauth.TokenInfoFromContext(r.Context()))
		if err != nil {
			writeError(w, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", cause: err})
			return
		}
		extendDeadlines(w, longest)
		r.Header.Del(mcpCallHeader) // only the gateway names a call
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		call, e := s.beginMCPCall(p, r)
		if e != nil {
			writeError(w, e)
			return
		}
		defer call.end()
		r.Header.Set(mcpCallHeader, call.token)
		if r.Header.Get("Mcp-Session-Id") != "" || mcpserver.Sessionless(r) {
			next.ServeHTTP(w, r)
			return
		}
		// No session yet, and not sessionless: this request opens one.
		release, e := s.openMCPSession(p)
		if e != nil {
			writeError(w, e)
			return
		}
		srv := s.newMCPServer(r)
		next.ServeHTTP(w, r.WithContext(withSessionServer(r.Context(), srv)))
		holdWhileLive(srv, release)
	})
}

// verifyMCPKey authenticates an /mcp request with the REST API's key store. The key id is the session's
// user, so that the SDK refuses a session's calls made with another key.
func (s *Server) verifyMCPKey(ctx context.Context, key string, _ *http.Request) (*mcpauth.TokenInfo, error) {
	p, err := s.opts.Auth.Authenticate(ctx, key)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return nil, fmt.Errorf("%w: invalid or revoked API key", mcpauth.ErrInvalidToken)
	case errors.Is(err, auth.ErrNotTenant):
		return nil, fmt.Errorf("%w: %v", mcpauth.ErrInvalidToken, err)
	case err != nil:
		return nil, fmt.Errorf("the API key could not be checked; retry shortly: %w", err)
	}
	if pp := principalFrom(ctx); pp != nil {
		*pp = p // the access log names the tenant
	}
	return &mcpauth.TokenInfo{UserID: p.KeyID, Extra: map[string]any{"tenant": p.Tenant}}, nil
}

// mcpPrincipal is the caller verifyMCPKey authenticated.
func mcpPrincipal(ti *mcpauth.TokenInfo) (auth.Principal, error) {
	if ti == nil {
		return auth.Principal{}, errors.New("an MCP request without the caller's token info")
	}
	tenant, _ := ti.Extra["tenant"].(string)
	if ti.UserID == "" || tenant == "" {
		return auth.Principal{}, errors.New("an MCP request's token info names no key or tenant")
	}
	return auth.Principal{KeyID: ti.UserID, Tenant: tenant}, nil
}

// CloseMCPSessions ends this replica's MCP sessions and deletes their sandboxes; on shutdown, as the
// sessions live in this process and die with it.
func (s *Server) CloseMCPSessions() {
	if s.mcpSessions != nil {
		s.mcpSessions.Close()
	}
}
