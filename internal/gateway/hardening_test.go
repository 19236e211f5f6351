package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

// fixedEngine answers every command with res and err.
type fixedEngine struct {
	res *podexec.Result
	err error
}

func (f fixedEngine) Stream(context.Context, podexec.Request, func(podexec.Chunk) error) (*podexec.Result, error) {
	return f.res, f.err
}

// readyServer has one Ready sandbox, sbx-a, in tenant t1, and runs commands on engine.
func readyServer(t *testing.T, engine Executor) http.Handler {
	t.Helper()
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx-a", Namespace: "t1"},
		Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseReady}}
	o := Options{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(sb).Build(), Engine: engine, Auth: oneKey("good")}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

func TestReadJSONRejectsTrailingData(t *testing.T) {
	h := unitServer(t)
	// The sandbox does not exist: a body that passed would be 404.
	for _, b := range []string{`{"command": "true"}}`, `{"command": "true"} x`, `{"command": "true"}]`, `{"command": "true"} {}`} {
		if code, body := call(t, h, "POST", "/v1/sandboxes/sbx-a/exec", b); code != 400 || errCode(body) != CodeInvalid {
			t.Errorf("body %q: %d %v, want 400", b, code, body)
		}
	}
}

func TestByteBudget(t *testing.T) {
	b := newByteBudget(100, 60)
	a1, e := b.reserve("a", 50)
	if e != nil {
		t.Fatal(e)
	}
	// The tenant's share: a second call of a over 60 is 429 with a hint; another tenant still gets in.
	if _, e := b.reserve("a", 20); e == nil || e.Status != http.StatusTooManyRequests || e.Code != CodeOutputBudget || e.RetryAfter <= 0 {
		t.Fatalf("tenant share: %v", e)
	}
	b1, e := b.reserve("b", 40)
	if e != nil {
		t.Fatal(e)
	}
	// The gateway's budget: full is 503 for anyone.
	if _, e := b.reserve("c", 20); e == nil || e.Status != http.StatusServiceUnavailable || e.Code != CodeGatewayBusy || e.RetryAfter <= 0 {
		t.Fatalf("total: %v", e)
	}
	// Growing is checked like reserving; shrinking and release give it back.
	if e := b1.resize(60); e == nil {
		t.Fatal("grew past the total")
	}
	if e := a1.resize(10); e != nil {
		t.Fatal(e)
	}
	if e := b1.resize(60); e != nil {
		t.Fatalf("after a shrank: %v", e)
	}
	a1.release()
	b1.release()
	a1.release()
	if b.used != 0 || len(b.byTenant) != 0 {
		t.Fatalf("left over: %d %v", b.used, b.byTenant)
	}
	// A call larger than the whole budget still runs alone.
	big, e := b.reserve("a", 1000)
	if e != nil {
		t.Fatalf("lone call: %v", e)
	}
	big.release()
}

// A command whose budget the tenant's share cannot hold is a clear 429 with Retry-After, before it runs.
func TestExecOverMemoryBudget(t *testing.T) {
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(&airlockv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx-a", Namespace: "t1"}, Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseReady}}).Build(),
		Engine: noEngine{}, Auth: oneKey("good"), MaxInflightBytes: 8 << 20, MaxInflightBytesPerTenant: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Another command of t1 in flight holds part of its share.
	held, e := s.memory.reserve("t1", 1<<20)
	if e != nil {
		t.Fatal(e)
	}
	defer held.release()
	req := httptest.NewRequest("POST", "/v1/sandboxes/sbx-a/exec", strings.NewReader(`{"command": "true", "max_output_bytes": 1048576}`))
	req.Header.Set("Authorization", "Bearer good")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), CodeOutputBudget) {
		t.Fatalf("%d %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	if s.memory.used != 1<<20 {
		t.Fatalf("refused call left %d bytes reserved", s.memory.used-1<<20)
	}
}

// The streamed result is exactly the JSON encoding of the response (HTML escaping off).
func TestWriteExecResultMatchesEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "<", ">", "&", "\x01", "\n", "\"", "\\", "é", "€", "𝄞", "\u2028", `\xff`}
	for i := range 200 {
		var out, errOut strings.Builder
		for range r.IntN(40000) {
			out.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		for range r.IntN(100) {
			errOut.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		resp := ExecResponse{ExitCode: i, Stdout: out.String(), Stderr: errOut.String(), Outcome: "exited",
			Detail: `"stdout":"" inside`}
		var want strings.Builder
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(resp); err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		if err := writeExecResult(&got, resp); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("case %d: streamed result differs from the encoding", i)
		}
	}
}

// A result that comes with an engine error (the call was cut short) is answered, never an empty 200.
func TestExecResultWithErrorIsAnswered(t *testing.T) {
	res := &podexec.Result{Outcome: podexec.OutcomeSandboxLost, ExitCode: -1, Stdout: "partial"}
	h := readyServer(t, fixedEngine{res: res, err: errors.New("exec output consumer: broken pipe")})
	code, body := call(t, h, "POST", "/v1/sandboxes/sbx-a/exec", `{"command": "true"}`)
	if code != 200 || body["stdout"] != "partial" || body["outcome"] != "sandbox_lost" {
		t.Fatalf("%d %v", code, body)
	}
	if d, _ := body["detail"].(string); !strings.Contains(d, "broken pipe") {
		t.Fatalf("detail %q", d)
	}
}

// pods/exec refused by RBAC is the gateway's configuration error, not a sandbox that is gone.
func TestExecForbiddenIsMisconfiguration(t *testing.T) {
	err := fmt.Errorf("exec in t1/sbx-a: %w: %w: %w", podexec.ErrNotStarted, podexec.ErrForbidden, errors.New(`pods "sbx-a" is forbidden`))
	h := readyServer(t, fixedEngine{err: err})
	code, body := call(t, h, "POST", "/v1/sandboxes/sbx-a/exec", `{"command": "true"}`)
	if msg := errMessage(body); code != 500 || errCode(body) != CodeMisconfigured || !strings.Contains(msg, "pods/exec") || !strings.Contains(msg, "t1") {
		t.Fatalf("%d %v", code, body)
	}
}

func errMessage(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// failingAuth fails every lookup with err.
type failingAuth struct{ err error }

func (f failingAuth) Authenticate(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, f.err
}

// Only a bad key is 401: an API server that cannot be asked is 503 with a retry hint.
func TestAuthLookupErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	for _, c := range []struct {
		err  error
		code int
		name string
	}{
		{auth.ErrUnauthenticated, 401, CodeUnauthenticated},
		{fmt.Errorf("key x: %w", apierrors.NewServiceUnavailable("etcd down")), 503, CodeUnavailable},
		{fmt.Errorf("key x: %w", &netErr{}), 503, CodeUnavailable},
		{fmt.Errorf("key x: %w", apierrors.NewForbidden(gr, "airlock-key-x", errors.New("rbac"))), 500, CodeMisconfigured},
	} {
		s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: failingAuth{c.err}})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer alk_x_y")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != c.code || errCode(body) != c.name || (c.code == 503 && rec.Header().Get("Retry-After") == "") {
			t.Errorf("%v: %d %v, want %d %s", c.err, rec.Code, body, c.code, c.name)
		}
	}
}

// A panic after an answer started: an NDJSON stream ends with an error line; any other body is cut off
// (the client sees a broken response), never followed by a second JSON body.
func TestRecovererAfterAnswerStarted(t *testing.T) {
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.accessLog(s.recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ndjson" {
			nw := newNDJSONWriter(w)
			if err := nw.line(ChunkLine{Stream: "stdout", Data: "x"}); err != nil {
				panic(err)
			}
			panic("boom")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"partial": `))
		_ = http.NewResponseController(w).Flush()
		panic("boom")
	}))))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/ndjson", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if resp.StatusCode != 200 || len(lines) != 2 || errCode(lines[1]) != CodeInternal {
		t.Fatalf("ndjson: %d %v", resp.StatusCode, lines)
	}

	resp, err = http.Post(srv.URL+"/json", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("json: a complete body after a panic: %q", b)
	}
}
