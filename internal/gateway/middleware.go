package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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

// recoverer turns a panic into a logged 500; a handler bug must not take the gateway down. It runs inside
// accessLog, so w is the statusWriter and tells whether the answer has started: an NDJSON stream then ends
// with an error line, any other body is cut off (a second JSON body would corrupt the first).
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.opts.Logger.Error(nil, "panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			e := &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
			sw, ok := w.(*statusWriter)
			switch {
			case !ok || sw.status == 0:
				writeError(w, e)
			case strings.HasPrefix(w.Header().Get("Content-Type"), ndjsonType):
				_ = json.NewEncoder(w).Encode(errorEnvelope{e})
				sw.Flush()
			default:
				panic(http.ErrAbortHandler)
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
		if errors.Is(err, auth.ErrNotTenant) {
			// 403, not 401: the key is good, its namespace is not (or no longer) a tenant; a new key would not help.
			writeError(w, &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: err.Error()})
			return
		}
		if err != nil {
			writeError(w, authError(err))
			return
		}
		if pp := principalFrom(r.Context()); pp != nil {
			*pp = p
		}
		h(w, r, p)
	})
}

// authError maps a failed key lookup: only a key that is really bad is 401. An API server that cannot be
// asked is 503 (the key may be fine), a refusal of the gateway's own reads a configuration error; both are
// logged with their cause by the access log.
func authError(err error) *Error {
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "invalid or revoked API key"}
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return &Error{Status: http.StatusInternalServerError, Code: CodeMisconfigured, cause: err,
			Message: "the gateway may not read its API key Secrets (RBAC: secrets get, list, watch in its namespace); an operator must fix the gateway's role"}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: retryAfterBudget, cause: err,
		Message: "the API key could not be checked: the cluster is unreachable or overloaded; retry shortly"}
}
