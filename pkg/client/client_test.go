package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests pin the client's side of the protocol (error mapping, retries, NDJSON) against canned
// answers in the gateway's documented shapes; the real gateway is exercised by test/e2e/sdk_e2e_test.go.

func newTestClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Options{BaseURL: srv.URL + "/v1", APIKey: "alk_test_x", MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeErr(w http.ResponseWriter, status int, code, field string, retry int) {
	if retry > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(retry))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": "m", "field": field}})
}

func TestNewNeedsURLAndKey(t *testing.T) {
	t.Setenv("AIRLOCK_API_URL", "")
	t.Setenv("AIRLOCK_API_KEY", "")
	if _, err := New(Options{APIKey: "k"}); err == nil {
		t.Fatal("no URL accepted")
	}
	if _, err := New(Options{BaseURL: "http://x"}); err == nil {
		t.Fatal("no key accepted")
	}
	if _, err := New(Options{BaseURL: "ftp://x", APIKey: "k"}); err == nil {
		t.Fatal("ftp URL accepted")
	}
	t.Setenv("AIRLOCK_API_URL", "http://gw/")
	t.Setenv("AIRLOCK_API_KEY", "k")
	c, err := New(Options{})
	if err != nil || c.base != "http://gw" {
		t.Fatalf("from env: %v %+v", err, c)
	}
}

func TestErrorKinds(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   error
	}{
		{401, "unauthenticated", ErrAuthentication}, {403, "forbidden", ErrAuthentication},
		{404, "not_found", ErrNotFound}, {429, "quota_exceeded", ErrQuotaExceeded},
		{429, "rate_limited", ErrRateLimited}, {409, "sandbox_not_ready", ErrNotReady},
		{502, "sandbox_lost", ErrSandboxLost}, {503, "cluster_unavailable", ErrClusterUnavailable},
		{400, "invalid_request", ErrInvalidRequest},
	}
	for _, tc := range cases {
		c := newTestClient(t, func(w http.ResponseWriter, _ *http.Request) { writeErr(w, tc.status, tc.code, "size", 0) })
		c.maxRetries = 0
		_, err := c.List(context.Background())
		var e *Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status {
			t.Errorf("%d %s: got %v, want %v", tc.status, tc.code, err, tc.want)
		}
		if tc.code == "invalid_request" && e.Field != "size" {
			t.Errorf("field %q", e.Field)
		}
	}
}

// TestRetries: 429 and 503 are retried (the gateway did nothing), quota and other errors are not, and the
// Retry-After reaches the caller when the retries run out.
func TestRetries(t *testing.T) {
	var n atomic.Int32
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			writeErr(w, 429, "too_many_concurrent_execs", "", 0)
		case 2:
			writeErr(w, 503, "gateway_busy", "", 0)
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"exit_code": 0, "stdout": "ok\n", "outcome": "exited"})
		}
	})
	res, err := c.sandbox("sbx-1").Exec(context.Background(), "true", ExecOptions{})
	if err != nil || res.Stdout != "ok\n" || n.Load() != 3 {
		t.Fatalf("exec after two refusals: %v %+v (%d calls)", err, res, n.Load())
	}

	n.Store(0)
	c = newTestClient(t, func(w http.ResponseWriter, _ *http.Request) { n.Add(1); writeErr(w, 429, "quota_exceeded", "", 0) })
	if _, err := c.Create(context.Background(), CreateOptions{}); !errors.Is(err, ErrQuotaExceeded) || n.Load() != 1 {
		t.Fatalf("quota: %v after %d calls", err, n.Load())
	}

	n.Store(0)
	c = newTestClient(t, func(w http.ResponseWriter, _ *http.Request) { n.Add(1); writeErr(w, 429, "rate_limited", "", 7) })
	c.maxRetries = 2
	_, err = c.Create(context.Background(), CreateOptions{})
	var e *Error
	if !errors.As(err, &e) || e.RetryAfter != 7*time.Second || n.Load() != 3 {
		t.Fatalf("rate limited: %v after %d calls", err, n.Load())
	}
}

func TestExecStreamingAndTimeout(t *testing.T) {
	var got map[string]any
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		if r.Header.Get("Accept") != "application/x-ndjson" {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		fmt.Fprintln(w, `{"stream":"stdout","data":"one\n","offset":0}`)
		fmt.Fprintln(w, `{"stream":"stderr","data":"two\n","offset":0}`)
		fmt.Fprintln(w, `{"exit_code":-1,"duration_ms":2003,"stdout":"one\n","stderr":"two\n","truncated":false,"outcome":"timeout","signal":"SIGKILL"}`)
	})
	var out, errs strings.Builder
	opts := ExecOptions{Timeout: 2 * time.Second,
		OnStdout: func(s string) error { out.WriteString(s); return nil },
		OnStderr: func(s string) error { errs.WriteString(s); return nil }}
	res, err := c.sandbox("sbx-1").Exec(context.Background(), "sleep 9", opts)
	if err != nil || res.ExitCode != ExitTimeout || res.Outcome != "timeout" || out.String() != "one\n" || errs.String() != "two\n" {
		t.Fatalf("stream: %v %+v %q %q", err, res, out.String(), errs.String())
	}
	if got["timeout_ms"] != float64(2000) || got["command"] != "sleep 9" {
		t.Fatalf("request %v", got)
	}
	opts.ErrorOnTimeout = true
	res, err = c.sandbox("sbx-1").Exec(context.Background(), "sleep 9", opts)
	var te *ExecTimeoutError
	if !errors.Is(err, ErrExecTimeout) || !errors.As(err, &te) || te.Result != res || res.ExitCode != ExitTimeout {
		t.Fatalf("ErrorOnTimeout: %v %+v", err, res)
	}
}

func TestToolDefinitions(t *testing.T) {
	tc := ToolContext{Installed: "Python 3.11", WorkingDir: "/home/sandbox", Network: "none", DefaultTimeout: 30 * time.Second}
	a, err := ToolDefinitions(FormatAnthropic, tc)
	if err != nil || len(a) != 2 || a[0]["name"] != "run_command" || a[0]["input_schema"] == nil {
		t.Fatalf("anthropic: %v %v", err, a)
	}
	d := a[0]["description"].(string)
	for _, want := range []string{"Python 3.11", "/home/sandbox", "persist", "Stdin is closed", "30000 ms", "no network"} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q: %s", want, d)
		}
	}
	o, err := ToolDefinitions(FormatOpenAI, tc)
	if err != nil || o[1]["type"] != "function" || o[1]["function"].(map[string]any)["name"] != "run_python" {
		t.Fatalf("openai: %v %v", err, o)
	}
	if _, err := ToolDefinitions("vercel", tc); err == nil {
		t.Fatal("unknown format accepted")
	}
}

// A create sends what was asked and nothing else: the idle timeout and scoped secrets included.
func TestCreateSendsIdleTimeoutAndSecrets(t *testing.T) {
	var got map[string]any
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decode: %v", err)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"sbx-1","status":"ready"}`))
	})
	sbx, err := c.Create(context.Background(), CreateOptions{Template: "py", IdleTimeoutMinutes: 10, Network: "off",
		Secrets: map[string]string{"GIT_TOKEN": "t0ken"}})
	if err != nil || sbx.ID != "sbx-1" {
		t.Fatalf("create: %v %+v", err, sbx)
	}
	want := `{"idle_timeout_minutes":10,"network":"none","secrets":{"GIT_TOKEN":"t0ken"},"template":"py"}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("sent %s, want %s", b, want)
	}
}
