package mcpserver

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionlessVersion is the first protocol version without sessions (SEP-2575).
const sessionlessVersion = "2026-07-28"

// NewHTTPHandler serves MCP over streamable HTTP for both kinds of client. The SDK (v1.8.0) speaks
// 2026-07-28 over HTTP only in its stateless mode, and sessions only in its stateful one: a request of
// 2026-07-28 or later outside a session goes to a stateless handler (each call its own, sandbox_id in every
// result), everything else to a stateful one (initialize, Mcp-Session-Id, one sandbox per session).
func NewHTTPHandler(getServer func(*http.Request) *mcp.Server, opts mcp.StreamableHTTPOptions) http.Handler {
	stateful := mcp.NewStreamableHTTPHandler(getServer, &opts)
	opts.Stateless = true
	stateless := mcp.NewStreamableHTTPHandler(getServer, &opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Sessionless(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
}

// Sessionless says whether r goes to the stateless handler: a request of 2026-07-28 or later outside a
// session. Any other POST without Mcp-Session-Id opens a session.
func Sessionless(r *http.Request) bool {
	return r.Header.Get("Mcp-Session-Id") == "" && r.Header.Get("MCP-Protocol-Version") >= sessionlessVersion
}
