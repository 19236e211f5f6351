package egressproxy

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Timeouts for a connection that has not said what it wants: its request head must arrive within
// readHeadTimeout, and a keep-alive connection may wait idleTimeout for its next request. Either way it is
// displaceable meanwhile (LimitListener).
const (
	readHeadTimeout = 10 * time.Second
	idleTimeout     = 2 * time.Minute
)

// NewServer serves h on a LimitListener's connections with the limits that bound what a client may cost
// before it says what it wants (cost.go), and tells the listener which connections carry a request: from the
// handler's start until the response is complete (net/http's StateIdle, which a keep-alive connection enters
// to wait for its next request).
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           carrying(h),
		ReadHeaderTimeout: readHeadTimeout,
		MaxHeaderBytes:    maxRequestHeadBytes,
		IdleTimeout:       idleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, state http.ConnState) {
			if lc, ok := c.(*limitedConn); ok && state == http.StateIdle {
				lc.waiting()
			}
		},
	}
}

type connKey struct{}

// carrying marks the connection busy before h serves a request on it; a connection displaced meanwhile (its
// head was read as it was chosen) is not served.
func carrying(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok && !lc.busy() {
			return
		}
		h.ServeHTTP(w, r)
	})
}
