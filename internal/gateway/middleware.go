package gateway

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"airlock.dev/airlock/internal/gateway/auth"
)

// statusWriter remembers the status for the access log and passes Flush through for streaming.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	// cause is the error behind a 5xx answer, logged with the access line.
	cause error
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type ctxKey int

const tenantKey ctxKey = 0

// accessLog logs one line per request: method, path, status, duration, tenant. Never bodies or commands.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var p auth.Principal
		r = r.WithContext(contextWithPrincipal(r.Context(), &p))
		next.ServeHTTP(sw, r)
		if sw.cause != nil {
			s.opts.Logger.Error(sw.cause, "request failed", "method", r.Method, "path", r.URL.Path, "status", sw.status)
		}
		s.opts.Logger.Info("access", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"bytes", sw.bytes, "duration_ms", time.Since(start).Milliseconds(), "tenant", p.Tenant, "key", p.KeyID)
	})
}

// recoverer turns a panic into a logged 500; a handler bug must not take the gateway down.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.opts.Logger.Error(nil, "panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeError(w, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate checks the bearer key and passes the tenant to h.
func (s *Server) authenticate(h func(http.ResponseWriter, *http.Request, auth.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || key == "" {
			writeError(w, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "missing bearer API key: send Authorization: Bearer <key>"})
			return
		}
		p, err := s.opts.Auth.Authenticate(r.Context(), strings.TrimSpace(key))
		if err != nil {
			if !errors.Is(err, auth.ErrUnauthenticated) {
				s.opts.Logger.Error(err, "authenticating")
			}
			writeError(w, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "invalid or revoked API key"})
			return
		}
		if pp := principalFrom(r.Context()); pp != nil {
			*pp = p
		}
		h(w, r, p)
	})
}
