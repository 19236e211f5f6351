package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Kinds of failure, for errors.Is. An *Error matches exactly one of them (or none for an unusual status).
var (
	// ErrAuthentication: the key is missing, wrong or revoked (401), or its namespace is no tenant (403).
	ErrAuthentication = errors.New("airlock: authentication failed")
	// ErrNotFound: no such sandbox (or another tenant's), or no such file.
	ErrNotFound = errors.New("airlock: not found")
	// ErrQuotaExceeded: the tenant already has as many sandboxes as its quota allows.
	ErrQuotaExceeded = errors.New("airlock: quota exceeded")
	// ErrRateLimited: too many calls for now (429); Error.RetryAfter says when to try again.
	ErrRateLimited = errors.New("airlock: rate limited")
	// ErrNotReady: the sandbox is not Ready (yet, or any more); Error.Phase and Error.Reason say why.
	ErrNotReady = errors.New("airlock: sandbox not ready")
	// ErrSandboxLost: the sandbox stopped answering during a file transfer (502).
	ErrSandboxLost = errors.New("airlock: sandbox lost")
	// ErrClusterUnavailable: the gateway or the cluster behind it cannot serve now (503).
	ErrClusterUnavailable = errors.New("airlock: cluster unavailable")
	// ErrInvalidRequest: the gateway refused the input (400, 413); Error.Field names the field.
	ErrInvalidRequest = errors.New("airlock: invalid request")
	// ErrExecTimeout: a command timed out and ExecOptions.ErrorOnTimeout asked for an error.
	ErrExecTimeout = errors.New("airlock: command timed out")
)

// Error is the gateway's error answer: {"error": {"code", "message", "field"?, "phase"?, "reason"?}}.
type Error struct {
	Status  int    // HTTP status; 0 for an error line that ended an NDJSON stream after its 200
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// RetryAfter is the Retry-After header (0 when absent).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("airlock: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// Is matches the kind of the failure (ErrNotFound, ...).
func (e *Error) Is(target error) bool { return target != nil && e.kind() == target }

func (e *Error) kind() error {
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return ErrAuthentication
	case e.Status == http.StatusNotFound:
		return ErrNotFound
	case e.Code == "quota_exceeded":
		return ErrQuotaExceeded
	case e.Status == http.StatusTooManyRequests:
		return ErrRateLimited
	case e.Code == "sandbox_not_ready":
		return ErrNotReady
	case e.Code == "sandbox_lost" || e.Status == http.StatusBadGateway:
		return ErrSandboxLost
	case e.Status == http.StatusServiceUnavailable:
		return ErrClusterUnavailable
	case e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge:
		return ErrInvalidRequest
	}
	return nil
}

// retryable: the gateway refused before doing anything, and waiting may help. A full quota does not clear
// by itself soon, so it is not retried.
func (e *Error) retryable() bool {
	return (e.Status == http.StatusTooManyRequests && e.Code != "quota_exceeded") || e.Status == http.StatusServiceUnavailable
}

// ExecTimeoutError is returned, with the result, only when ExecOptions.ErrorOnTimeout is set.
type ExecTimeoutError struct{ Result *ExecResult }

func (e *ExecTimeoutError) Error() string {
	return fmt.Sprintf("airlock: command timed out after %d ms", e.Result.DurationMS)
}

// Is matches ErrExecTimeout.
func (e *ExecTimeoutError) Is(target error) bool { return target == ErrExecTimeout }

// parseRetryAfter reads Retry-After in seconds (the gateway never sends a date).
func parseRetryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
