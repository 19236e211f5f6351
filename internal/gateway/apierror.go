package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Error is what every failed call returns, as {"error": {"code", "message"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request field at fault, for bad input.
	Field string `json:"field,omitempty"`
	// Phase and Reason describe a sandbox that is not ready.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// RetryAfter, if set, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
	// cause is the underlying error of a 5xx, for the access log only: clients never see it.
	cause error
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Error codes.
const (
	CodeInvalid          = "invalid_request"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeNotReady         = "sandbox_not_ready"
	CodeTooLarge         = "too_large"
	CodeRateLimited      = "rate_limited"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeTooManyExecs     = "too_many_concurrent_execs"
	CodeTooManyStreams   = "too_many_exec_streams"
	CodeUnavailable      = "cluster_unavailable"
	CodeOutputBudget     = "memory_budget_exceeded"
	CodeGatewayBusy      = "gateway_busy"
	CodeMisconfigured    = "gateway_misconfigured"
	CodeInternal         = "internal"
	CodeMethodNotAllowed = "method_not_allowed"
)

func badField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

func notFound(what string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: what + " not found"}
}

// writeJSON answers v. HTML escaping is off: the body is JSON for programs (and nosniff), and escaping '<' as
// \u003c would multiply command output sixfold.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// answer writes e if there is one, else v with status.
func answer(w http.ResponseWriter, status int, v any, e *Error) {
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, status, v)
}

type errorEnvelope struct {
	Error *Error `json:"error"`
}

func writeError(w http.ResponseWriter, e *Error) {
	if sw, ok := w.(*statusWriter); ok && e.cause != nil {
		sw.cause = e.cause
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	writeJSON(w, e.Status, errorEnvelope{e})
}

// fromKube maps an API server error for a sandbox to the gateway's error. Unknown errors become 503 when the
// cluster could not be reached and 500 otherwise (never for bad input: that is validated first).
func fromKube(err error, what string) *Error {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case apierrors.IsNotFound(err):
		return notFound(what)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return &Error{Status: http.StatusTooManyRequests, Code: CodeQuotaExceeded,
			Message: "sandbox limit of this tenant reached (ResourceQuota): delete a sandbox and retry; " + statusMessage(err)}
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "status unknown for quota"):
		// The quota controller has not filled a new tenant's ResourceQuota status yet; admission refuses
		// until it does, usually within seconds.
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "this tenant's sandbox quota is still being initialised by the cluster; retry in a few seconds", cause: err}
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: statusMessage(err)}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: statusMessage(err)}
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err), isNetError(err):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the cluster is unreachable or overloaded; retry later", cause: err}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", cause: err}
}

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || strings.Contains(err.Error(), "connection refused")
}

func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}
