package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

func pool(name, tmpl string, mode airlockv1.NetworkMode, ready int32) *airlockv1.SandboxPool {
	return &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: name},
		Spec:   airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: tmpl}, NetworkMode: mode},
		Status: airlockv1.SandboxPoolStatus{ReadyMembers: ready}}
}

// A create names the tenant's pool for its template and network mode, the fullest of several, and none when
// no pool matches: the controller then claims a warm member or creates the pod cold.
func TestCreateNamesThePoolOfItsTemplateAndMode(t *testing.T) {
	tmpl := func(name string, mode airlockv1.NetworkMode) *airlockv1.SandboxTemplate {
		t := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: name},
			Spec: airlockv1.SandboxTemplateSpec{Image: "img"}}
		if mode != "" {
			t.Spec.Network = &airlockv1.NetworkSpec{Mode: mode}
		}
		return t
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		tmpl("py", ""), tmpl("open", airlockv1.NetworkRestricted), tmpl("bare", ""),
		pool("py-none", "py", airlockv1.NetworkNone, 1), pool("py-none-fuller", "py", "", 5),
		pool("py-restricted", "py", airlockv1.NetworkRestricted, 9), pool("open-default", "open", "", 1),
		pool("elsewhere", "bare", airlockv1.NetworkNone, 1),
	).Build()
	other := pool("bare", "bare", airlockv1.NetworkNone, 1)
	other.Namespace = "t2"
	if err := c.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Client: c, Engine: noEngine{}, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, tc := range []struct{ body, want string }{
		{`{"template":"py","wait":false}`, "py-none-fuller"},
		{`{"template":"py","network":"none","wait":false}`, "py-none-fuller"},
		{`{"template":"py","network":"restricted","wait":false}`, "py-restricted"},
		{`{"template":"open","wait":false}`, "open-default"},
		{`{"template":"open","network":"none","wait":false}`, ""},
		{`{"template":"bare","network":"restricted","wait":false}`, ""},
	} {
		code, body := call(t, h, "POST", "/v1/sandboxes", tc.body)
		if code != 201 {
			t.Fatalf("%s: %d %v", tc.body, code, body)
		}
		sb := &airlockv1.Sandbox{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "t1", Name: body["id"].(string)}, sb); err != nil {
			t.Fatal(err)
		}
		got := ""
		if sb.Spec.PoolRef != nil {
			got = sb.Spec.PoolRef.Name
		}
		if got != tc.want {
			t.Errorf("%s: poolRef %q, want %q", tc.body, got, tc.want)
		}
	}
}

// envEngine records the env of each command and answers exit 0.
type envEngine struct {
	mu  sync.Mutex
	env map[string]string
}

func (e *envEngine) Stream(_ context.Context, r podexec.Request, _ func(podexec.Chunk) error) (*podexec.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.env = maps.Clone(r.Env)
	return &podexec.Result{Outcome: podexec.OutcomeExited}, nil
}

// A sandbox that adopted a warm member gets its spec.env through every exec (its pod was made before the claim),
// less Airlock's reserved names; the request's env wins on a name. A sandbox with its own pod has spec.env in the
// pod already.
func TestExecBindsTheClaimsEnvLate(t *testing.T) {
	sb := func(name string, result airlockv1.PoolClaimResult) *airlockv1.Sandbox {
		s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t1"},
			// AIRLOCK_NODE_IP: a Sandbox made before the CRD refused Airlock's names; it must not reach a command.
			Spec: airlockv1.SandboxSpec{Env: []airlockv1.EnvVar{{Name: "TASK", Value: "42"}, {Name: "MODE", Value: "spec"},
				{Name: "AIRLOCK_NODE_IP", Value: "127.0.0.1"}}},
			Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseReady, PodName: name + "-pod"}}
		if result != "" {
			s.Status.Pool = &airlockv1.PoolClaimStatus{Name: "p", Result: result}
		}
		return s
	}
	engine := &envEngine{}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sb("warm", airlockv1.ClaimWarm), sb("cold", airlockv1.ClaimCold), sb("plain", "")).Build()
	s, err := New(Options{Client: c, Engine: engine, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, tc := range []struct {
		id   string
		want map[string]string
	}{
		{"warm", map[string]string{"TASK": "42", "MODE": "request"}},
		{"cold", map[string]string{"MODE": "request"}},
		{"plain", map[string]string{"MODE": "request"}},
	} {
		if code, body := call(t, h, "POST", "/v1/sandboxes/"+tc.id+"/exec", `{"command":"env","env":{"MODE":"request"}}`); code != 200 {
			t.Fatalf("%s: %d %v", tc.id, code, body)
		}
		if !maps.Equal(engine.env, tc.want) {
			t.Errorf("%s: env %v, want %v", tc.id, engine.env, tc.want)
		}
	}
}

// chunkEngine streams out in the given chunks (all stdout) and returns their concatenation as the result, with
// the env it was given.
type chunkEngine struct {
	chunks []string
	env    map[string]string
}

func (e *chunkEngine) Stream(_ context.Context, r podexec.Request, onChunk func(podexec.Chunk) error) (*podexec.Result, error) {
	e.env = maps.Clone(r.Env)
	all := ""
	for _, c := range e.chunks {
		all += c
		if onChunk != nil {
			if err := onChunk(podexec.Chunk{Stream: "stdout", Data: c}); err != nil {
				return nil, err
			}
		}
	}
	return &podexec.Result{Outcome: podexec.OutcomeExited, Stdout: all}, nil
}

// A create's secrets are stored in a Secret owned by the sandbox, named on it but nowhere in its spec; every
// command gets them in its env and its output shows them masked, also when a value is split across streamed
// chunks. Without its Secret a command does not run.
func TestScopedSecretsAreInjectedAndMasked(t *testing.T) {
	ctx := context.Background()
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "py"}, Spec: airlockv1.SandboxTemplateSpec{Image: "img"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tmpl).WithStatusSubresource(&airlockv1.Sandbox{}).Build()
	const token = "ghp-s3cr3t-t0ken"
	engine := &chunkEngine{chunks: []string{"token=ghp-s3", "cr3t-t0", "ken done\n"}}
	s, err := New(Options{Client: c, Engine: engine, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	code, body := call(t, h, "POST", "/v1/sandboxes", `{"template":"py","wait":false,"env":{"A":"1"},"secrets":{"GIT_TOKEN":"`+token+`"}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	id := body["id"].(string)
	sb := &airlockv1.Sandbox{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "t1", Name: id}, sb); err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(sb); strings.Contains(string(raw), token) {
		t.Fatalf("the secret's value is in the Sandbox: %s", raw)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "t1", Name: id + "-secrets"}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["GIT_TOKEN"]) != token || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Name != id || !*sec.Immutable {
		t.Fatalf("secret %+v", sec)
	}
	sb.Status.Phase = airlockv1.PhaseReady
	if err := c.Status().Update(ctx, sb); err != nil {
		t.Fatal(err)
	}

	code, body = call(t, h, "POST", "/v1/sandboxes/"+id+"/exec", `{"command":"echo token=$GIT_TOKEN done"}`)
	if code != 200 || body["stdout"] != "token=[masked:GIT_TOKEN] done\n" {
		t.Fatalf("exec: %d %v", code, body)
	}
	if engine.env["GIT_TOKEN"] != token {
		t.Fatalf("env %v lacks the secret", engine.env)
	}
	req := httptest.NewRequest("POST", "/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"command":"x"}`))
	req.Header.Set("Authorization", "Bearer good")
	req.Header.Set("Accept", "application/x-ndjson")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if strings.Contains(rec.Body.String(), "s3cr3t") || strings.Count(rec.Body.String(), "[masked:GIT_TOKEN]") != 2 {
		t.Fatalf("streamed: %s", rec.Body.String())
	}

	// A new gateway replica (empty cache) refuses to run a command without the Secret.
	if err := c.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	s2, err := New(Options{Client: c, Engine: engine, Auth: oneKey("good")})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, s2.Handler(), "POST", "/v1/sandboxes/"+id+"/exec", `{"command":"true"}`); code != 409 || errCode(body) != CodeNotReady {
		t.Fatalf("without its Secret: %d %v", code, body)
	}
}

func TestSecretsValidation(t *testing.T) {
	for _, tc := range []struct {
		req  CreateRequest
		fail bool
	}{
		{CreateRequest{Secrets: map[string]string{"GIT_TOKEN": "x"}}, false},
		{CreateRequest{Secrets: map[string]string{"1BAD": "x"}}, true},
		{CreateRequest{Secrets: map[string]string{"A": "x"}, Env: map[string]string{"A": "y"}}, true},
		{CreateRequest{Secrets: map[string]string{"A": "a\x00b"}}, true},
		{CreateRequest{Secrets: map[string]string{"A": strings.Repeat("x", maxEnvValue+1)}}, true},
	} {
		if got := validateSecrets(&tc.req) != nil; got != tc.fail {
			t.Errorf("%v: failed %v, want %v", tc.req, got, tc.fail)
		}
	}
}

// The streamed output, however it is cut into chunks, joins to the masked output, and no chunk carries a
// value or a piece of one.
func TestMaskerStreamsMaskedWhateverTheChunks(t *testing.T) {
	m := func() *masker {
		return &masker{names: []string{"A", "B"}, values: []string{"abcdef", "xyz1"}, hold: 5, pending: map[string]string{}}
	}
	out := "1abcdef2xyz1xyabcdefxyz1é3abcde"
	want := "1[masked:A]2[masked:B]xy[masked:A][masked:B]é3abcde"
	for cut := 1; cut <= len(out); cut++ {
		mk := m()
		var got string
		for i := 0; i < len(out); i += cut {
			for _, c := range mk.chunk(podexec.Chunk{Stream: "stdout", Data: out[i:min(i+cut, len(out))]}) {
				if strings.Contains(c.Data, "abcdef") || strings.Contains(c.Data, "xyz1") {
					t.Fatalf("cut %d: chunk %q carries a value", cut, c.Data)
				}
				got += c.Data
			}
		}
		for _, c := range mk.flush() {
			got += c.Data
		}
		if got != want {
			t.Errorf("chunks of %d: %q, want %q", cut, got, want)
		}
	}
	var nilMasker *masker
	if cs := nilMasker.chunk(podexec.Chunk{Stream: "stdout", Data: "x"}); len(cs) != 1 || cs[0].Data != "x" {
		t.Errorf("nil masker: %v", cs)
	}
}

// A background process's output read back in pieces, at any offsets and sizes, shows values only masked: a
// read of the file ending inside a value takes it whole, one starting inside a value shows it masked, and a
// possible start of a value that the process may still finish is left for a later read.
func TestMaskerWindowsOfOutputFiles(t *testing.T) {
	m := &masker{names: []string{"A", "B"}, values: []string{"abcdef", "xyz1"}, hold: 5}
	file := []byte("1abcdef2xyz1xyabcdefxyz1é3abcde")
	want := "1[masked:A]2[masked:B]xy[masked:A][masked:B]é3abcde"
	// read is what getProcess does: a window of hold bytes either side, from the file as the process left it.
	read := func(file []byte, off, limit int, running bool) (string, int) {
		winOff := max(off-m.hold, 0)
		win := file[min(winOff, len(file)):min(off+limit+m.hold, len(file))]
		text, next := readText(m, win, int64(winOff), int64(off), int64(limit), int64(len(file)), running)
		return text, int(next)
	}
	for limit := 1; limit <= len(file); limit++ {
		var got string
		for off, n := 0, 0; off < len(file); n++ {
			text, next := read(file, off, limit, false)
			if next <= off || n > len(file) {
				t.Fatalf("limit %d: read at %d moved to %d", limit, off, next)
			}
			got, off = got+text, next
		}
		if got != want {
			t.Errorf("reads of %d: %q, want %q", limit, got, want)
		}
	}
	// Byte-sized reads at every offset, as someone piecing a value together would make.
	var pieces string
	for off := range file {
		text, _ := read(file, off, 1, false)
		pieces += text
	}
	for _, piece := range []string{"abcdef", "bcdef", "cdef", "xyz1", "yz1"} {
		if strings.Contains(pieces, piece) {
			t.Errorf("byte-sized reads show %q: %q", piece, pieces)
		}
	}
	// While the process runs, a value it has only begun to write waits, and then arrives masked.
	if text, next := read([]byte("1abc"), 0, 64, true); text != "1" || next != 1 {
		t.Errorf("running, unfinished value: %q next %d", text, next)
	}
	if text, next := read([]byte("1abcdef2"), 1, 64, false); text != "[masked:A]2" || next != 8 {
		t.Errorf("finished: %q next %d", text, next)
	}
	if text, next := read([]byte("1abc"), 0, 64, false); text != "1abc" || next != 4 {
		t.Errorf("exited, never a value: %q next %d", text, next)
	}
}
