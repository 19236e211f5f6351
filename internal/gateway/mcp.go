package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
	"airlock.dev/airlock/pkg/client"
)

// DefaultMCPSessionTimeout is how long an MCP session may be idle before it ends (and its sandbox is deleted).
const DefaultMCPSessionTimeout = 30 * time.Minute

// mcpHandler serves the Model Context Protocol at /mcp (docs/mcp.md). The tools call this server's own REST
// handler in process with the caller's key, so that auth, tenancy, quotas, rate and body limits, audit and
// activity are exactly the REST API's.
func (s *Server) mcpHandler() http.Handler {
	s.mcpSessions = mcpserver.NewSessions(s.opts.Logger.WithName("mcp"))
	clientFor := func(_ context.Context, req *mcp.CallToolRequest) (*client.Client, error) {
		key, ok := strings.CutPrefix(req.Extra.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return nil, errors.New("the call carries no bearer key")
		}
		return client.New(client.Options{BaseURL: "http://gateway.in-process", APIKey: strings.TrimSpace(key),
			HTTPClient: &http.Client{Transport: inProcess{s}}, MaxRetries: 2})
	}
	shared := mcpserver.NewServer(mcpserver.Options{Client: clientFor, Sessions: s.mcpSessions})
	h := mcpserver.NewHTTPHandler(func(r *http.Request) *mcp.Server {
		if r.Header.Get("Mcp-Session-Id") != "" {
			return shared // an existing session has its server already; this one only answers the version check
		}
		// A new session: its sandbox is made as the query asks (?template=&size=&network=).
		q := r.URL.Query()
		return mcpserver.NewServer(mcpserver.Options{Client: clientFor, Sessions: s.mcpSessions,
			Create: client.CreateOptions{Template: q.Get("template"), Size: q.Get("size"), Network: q.Get("network")}})
	}, mcp.StreamableHTTPOptions{
		SessionTimeout: s.opts.MCPSessionTimeout,
		// A call's payload (write_file's content) is held to the REST limits by the call it makes; this only
		// bounds the envelope.
		MaxRequestBodyBytes: s.opts.MaxFileBytes + s.opts.MaxBodyBytes,
	})
	authed := mcpauth.RequireBearerToken(s.verifyMCPKey, &mcpauth.RequireBearerTokenOptions{
		AllowMissingExpiration: true, // API keys do not expire; they are revoked
	})(h)
	// A tool call may run a command as long as an exec may; a session's GET stream lasts the session.
	longest := max(s.opts.MaxExecTimeout, s.opts.MCPSessionTimeout) + execDeadlineSlack
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		extendDeadlines(w, longest)
		authed.ServeHTTP(w, r)
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

// CloseMCPSessions ends this replica's MCP sessions and deletes their sandboxes; on shutdown, as the
// sessions live in this process and die with it.
func (s *Server) CloseMCPSessions() {
	if s.mcpSessions != nil {
		s.mcpSessions.Close()
	}
}

// inProcess is an http.RoundTripper that serves requests with the gateway's own handler. The tools' calls
// are small or bounded by the REST limits, so the answer is buffered.
type inProcess struct{ s *Server }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := &bufferedResponse{header: http.Header{}}
	t.s.handler.ServeHTTP(w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		StatusCode: w.status, Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(&w.body), ContentLength: int64(w.body.Len()), Request: r,
	}, nil
}

// bufferedResponse is the http.ResponseWriter of an in-process call.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferedResponse) Header() http.Header { return w.header }

func (w *bufferedResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *bufferedResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush is a no-op: the whole answer is read after the handler returns.
func (w *bufferedResponse) Flush() {}
