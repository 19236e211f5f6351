package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

// oneKey accepts a single key; the real Store is covered by the integration tests.
type oneKey string

func (k oneKey) Authenticate(_ context.Context, key string) (auth.Principal, error) {
	if key != string(k) {
		return auth.Principal{}, auth.ErrUnauthenticated
	}
	return auth.Principal{KeyID: "k1", Tenant: "t1"}, nil
}

type noEngine struct{}

func (noEngine) Stream(context.Context, podexec.Request, func(podexec.Chunk) error) (*podexec.Result, error) {
	return nil, errors.New("not reached: validation fails first")
}

// unitServer's client is never reached by these tests: every request fails validation first.
func unitServer(t *testing.T) http.Handler {
	t.Helper()
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer good")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("%s %s: body %q is not JSON", method, path, rec.Body.String())
	}
	if _, ok := m["error"]; rec.Code >= 400 && !ok {
		t.Fatalf("%s %s: %d without the error envelope: %v", method, path, rec.Code, m)
	}
	return rec.Code, m
}

func TestValidationNamesTheField(t *testing.T) {
	h := unitServer(t)
	cases := []struct{ path, body, field string }{
		{"/v1/sandboxes", `{"size": "huge"}`, "size"},
		{"/v1/sandboxes", `{"size": 3}`, "size"},
		{"/v1/sandboxes", `{"timeout_minutes": 0}`, "timeout_minutes"},
		{"/v1/sandboxes", `{"timeout_minutes": 99999}`, "timeout_minutes"},
		{"/v1/sandboxes", `{"timeout_minutes": "30"}`, "timeout_minutes"},
		{"/v1/sandboxes", `{"network": "open"}`, "network"},
		{"/v1/sandboxes", `{"template": "Bad_Name"}`, "template"},
		{"/v1/sandboxes", `{"env": {"1X": "a"}}`, "env"},
		{"/v1/sandboxes", `{"env": {"AIRLOCK_NODE_IP": ""}}`, "env"},
		{"/v1/sandboxes", `{"env": {"GOGC": "off"}}`, "env"},
		{"/v1/sandboxes", `{"secrets": {"AIRLOCK_MEMORY_GUARD": "off"}}`, "secrets"},
		{"/v1/sandboxes", `{"metadata": {"-k": "v"}}`, "metadata"},
		{"/v1/sandboxes", `{"wait": "yes"}`, "wait"},
		{"/v1/sandboxes", `{"sise": "small"}`, "sise"},
		{"/v1/sandboxes/sbx-a/timeout", `{}`, "timeout_minutes"},
		{"/v1/sandboxes/sbx-a/exec", `{}`, "command"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "argv": ["b"]}`, "command"},
		{"/v1/sandboxes/sbx-a/exec", `{"argv": [""]}`, "argv"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a\u0000"}`, "command"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "timeout_ms": 0}`, "timeout_ms"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "timeout_ms": 1e12}`, "timeout_ms"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "max_output_bytes": 10}`, "max_output_bytes"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "kill_after_output_bytes": -1}`, "kill_after_output_bytes"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "env": {"A=B": "x"}}`, "env"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "env": {"AIRLOCK_RUNWRAP_ROLE": "keeper"}}`, "env"},
		{"/v1/sandboxes/sbx-a/exec", `{"command": "a", "stdin": 5}`, "stdin"},
	}
	for _, c := range cases {
		code, body := call(t, h, "POST", c.path, c.body)
		if code != 400 || errField(body) != c.field || errCode(body) != CodeInvalid {
			t.Errorf("%s %s: %d %v, want 400 naming %q", c.path, c.body, code, body, c.field)
		}
		if msg := errMessage(body); !strings.HasPrefix(msg, c.field+":") {
			t.Errorf("%s %s: message %q does not start with the field", c.path, c.body, msg)
		}
	}
	// Malformed bodies: 400 with the envelope, never 500.
	for _, b := range []string{``, `{`, `[]`, `{"size": "small"} {}`, `null x`} {
		if code, _ := call(t, h, "POST", "/v1/sandboxes", b); code != 400 {
			t.Errorf("body %q: %d", b, code)
		}
	}
}

func TestErrorEnvelopeAndAuth(t *testing.T) {
	h := unitServer(t)
	req := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer bad")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" || !strings.Contains(rec.Body.String(), `"code":"unauthenticated"`) {
		t.Fatalf("bad key: %d %s", rec.Code, rec.Body.String())
	}
	if code, body := call(t, h, "GET", "/v1/nope", ""); code != 404 || errCode(body) != CodeNotFound {
		t.Fatalf("unknown route: %d %v", code, body)
	}
	if code, body := call(t, h, "PATCH", "/v1/sandboxes", ""); code != 405 || errCode(body) != CodeMethodNotAllowed {
		t.Fatalf("wrong method: %d %v", code, body)
	}
	big := `{"command": "` + strings.Repeat("a", 2<<20) + `"}`
	if code, body := call(t, h, "POST", "/v1/sandboxes/sbx-a/exec", big); code != 413 || errCode(body) != CodeTooLarge {
		t.Fatalf("large body: %d %v", code, body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	var doc map[string]any
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &doc) != nil || doc["openapi"] == nil {
		t.Fatalf("openapi: %d", rec.Code)
	}
}

func TestRecovererAnswers500(t *testing.T) {
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	h := s.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":"internal"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

func TestFromKubeMapping(t *testing.T) {
	gr := schema.GroupResource{Group: "sandbox.airlock.dev", Resource: "sandboxes"}
	quota := apierrors.NewForbidden(gr, "", errors.New("exceeded quota: airlock-sandboxes, requested: count/sandboxes.sandbox.airlock.dev=1, used: count/sandboxes.sandbox.airlock.dev=20, limited: count/sandboxes.sandbox.airlock.dev=20"))
	cases := []struct {
		err  error
		code int
		name string
	}{
		{quota, 429, CodeQuotaExceeded},
		{apierrors.NewForbidden(gr, "x", errors.New("rbac says no")), 500, CodeInternal},
		{apierrors.NewNotFound(gr, "x"), 404, CodeNotFound},
		{apierrors.NewAlreadyExists(gr, "x"), 409, CodeConflict},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Sandbox"}, "x", nil), 400, CodeInvalid},
		{apierrors.NewServiceUnavailable("down"), 503, CodeUnavailable},
		{apierrors.NewTooManyRequests("slow down", 1), 503, CodeUnavailable},
		{fmt.Errorf("get: %w", &netErr{}), 503, CodeUnavailable},
	}
	for _, c := range cases {
		e := fromKube(c.err, "sandbox")
		if e.Status != c.code || e.Code != c.name {
			t.Errorf("%v -> %d %s, want %d %s", c.err, e.Status, e.Code, c.code, c.name)
		}
	}
}

type netErr struct{}

func (*netErr) Error() string   { return "dial tcp 10.0.0.1:6443: connect: connection refused" }
func (*netErr) Timeout() bool   { return false }
func (*netErr) Temporary() bool { return true }

func TestNDJSONFraming(t *testing.T) {
	if !wantsNDJSON(&http.Request{Header: http.Header{"Accept": {"application/json, application/x-ndjson;q=0.9"}}}) ||
		wantsNDJSON(&http.Request{Header: http.Header{"Accept": {"application/json"}}}) {
		t.Fatal("Accept parsing")
	}
	rec := httptest.NewRecorder()
	nw := newNDJSONWriter(rec)
	nw.enc.SetEscapeHTML(false)
	for _, d := range []string{"a\nb", "<tag>&", "\u2028 \"q\""} {
		if err := nw.line(ChunkLine{Stream: "stdout", Data: d}); err != nil {
			t.Fatal(err)
		}
	}
	_ = nw.line(ExecResponse{Outcome: "exited"})
	lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
	if len(lines) != 4 || rec.Header().Get("Content-Type") != ndjsonType || !rec.Flushed {
		t.Fatalf("framing: %q", rec.Body.String())
	}
	var c ChunkLine
	if err := json.Unmarshal([]byte(lines[1]), &c); err != nil || c.Data != "<tag>&" {
		t.Fatalf("line 2: %q %v", lines[1], err)
	}
	if !strings.Contains(lines[3], `"outcome":"exited"`) {
		t.Fatalf("last line: %q", lines[3])
	}
}
