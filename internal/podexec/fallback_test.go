package podexec

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	amhttpstream "k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // the test shows this deprecated check does not trigger the fallback
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"airlock.dev/airlock/internal/testutil/execserver"
)

// The error client-go's WebSocket executor returns for a refused upgrade
// must trigger the fallback; the apimachinery look-alike predicate (what
// pre-v0.36 code used) does not recognise it.
func TestShouldFallbackOnRealUpgradeFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no websockets here", http.StatusBadRequest)
	}))
	defer srv.Close()
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: srv.URL}, "GET", srv.URL+"/api/v1/namespaces/ns/pods/p/exec?command=true&stdout=true")
	if err != nil {
		t.Fatal(err)
	}
	err = ex.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdout: discard{}})
	if err == nil {
		t.Fatal("upgrade unexpectedly succeeded")
	}
	if !ShouldFallback(err) {
		t.Fatalf("ShouldFallback(%v) = false", err)
	}
	if amhttpstream.IsUpgradeFailure(err) {
		t.Fatalf("apimachinery predicate now matches; the note in ShouldFallback is stale")
	}
	if ShouldFallback(errors.New("connection reset")) || ShouldFallback(nil) {
		t.Fatal("fallback on unrelated errors")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestEngineFallsBackToSPDY(t *testing.T) {
	env := newEnv(t, ProtocolAuto, func(so *execserver.Options, _ *Options) { so.DisableWebSocket = true })
	res := env.run(t, Request{Shell: "echo via-fallback; exit 5"})
	if res.Outcome != OutcomeExited || res.ExitCode != 5 || res.Stdout != "via-fallback\n" || res.Protocol != "spdy" {
		t.Fatalf("%+v", res)
	}
	if ws, sp := env.srv.WebSocketRequests.Load(), env.srv.SPDYRequests.Load(); ws != 1 || sp != 1 {
		t.Fatalf("websocket attempts %d, spdy %d; want 1 and 1", ws, sp)
	}

	// Forced WebSocket does not fall back: nothing ran.
	ws := newEnv(t, ProtocolWebSocket, func(so *execserver.Options, _ *Options) { so.DisableWebSocket = true })
	_, err := ws.eng.Run(t.Context(), ws.keyed(Request{Namespace: "ns", Pod: "p", Argv: []string{"true"}}))
	if !errors.Is(err, ErrNotStarted) || ws.srv.SPDYRequests.Load() != 0 {
		t.Fatalf("err %v, spdy %d", err, ws.srv.SPDYRequests.Load())
	}
}

func TestEngineAutoPrefersWebSocket(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	res := env.run(t, Request{Argv: []string{"true"}})
	if res.Protocol != "websocket" || env.srv.WebSocketRequests.Load() != 1 || env.srv.SPDYRequests.Load() != 0 {
		t.Fatalf("%s; ws %d spdy %d", res.Protocol, env.srv.WebSocketRequests.Load(), env.srv.SPDYRequests.Load())
	}
}

func TestEngineNotStarted(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, func(so *execserver.Options, _ *Options) { so.Pods = []string{"exists"} })
			res, err := env.eng.Run(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "missing", Argv: []string{"true"}}))
			if !errors.Is(err, ErrNotStarted) || res != nil {
				t.Fatalf("res %+v err %v", res, err)
			}
			if res := env.run(t, Request{Namespace: "ns", Pod: "exists", Argv: []string{"true"}}); res.Outcome != OutcomeExited {
				t.Fatalf("%+v", res)
			}
		})
	}
	// Nothing listening.
	eng, err := New(&rest.Config{Host: "http://127.0.0.1:1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Run(t.Context(), Request{Namespace: "ns", Pod: "p", SupervisorKey: someKey, Argv: []string{"true"}}); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("unreachable server: %v", err)
	}
}

// The API server refusing pods/exec (RBAC) is ErrNotStarted and ErrForbidden
// on every transport, so the gateway can call it a configuration error rather
// than a missing pod.
func TestEngineForbiddenExec(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
			`"message":"pods \"p\" is forbidden: User \"system:serviceaccount:airlock-system:airlock-gateway\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"ns\""}`))
	}))
	defer srv.Close()
	for _, p := range protocols {
		eng, err := New(&rest.Config{Host: srv.URL}, Options{Protocol: p})
		if err != nil {
			t.Fatal(err)
		}
		res, err := eng.Run(t.Context(), Request{Namespace: "ns", Pod: "p", SupervisorKey: someKey, Argv: []string{"true"}})
		if res != nil || !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: res %+v err %v, want ErrNotStarted and ErrForbidden", p, res, err)
		}
	}
}

// The session is up but the runtime cannot start the process (the kubelet's
// "failed to exec in container", as containerd under load): not started, never
// sandbox_lost, so the caller can retry.
func TestEngineRuntimeStartFailure(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, func(so *execserver.Options, eo *Options) {
				so.Rewrite[DefaultWrapperPath] = "/no/such/airlock-init"
				eo.RuntimeStartRetry = 2 * time.Second
			})
			start := time.Now()
			res, err := env.eng.Run(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p", Argv: []string{"true"}}))
			if res != nil || !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrRuntimeStart) {
				t.Fatalf("want ErrNotStarted + ErrRuntimeStart, got %+v, %v", res, err)
			}
			if took := time.Since(start); took < time.Second || took > 10*time.Second {
				t.Errorf("gave up after %v, want about the 2s retry budget", took)
			}
		})
	}
}

// A runtime that cannot start the command for a moment (its binary appears
// 700 ms later here; a loaded containerd in real life) is retried: the
// command runs once, and its result is returned as if nothing happened.
func TestEngineRuntimeStartRetried(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			late := filepath.Join(t.TempDir(), "airlock-init")
			env := newEnv(t, p, func(so *execserver.Options, _ *Options) { so.Rewrite[DefaultWrapperPath] = late })
			timer := time.AfterFunc(700*time.Millisecond, func() { _ = os.Symlink(wrapperBin, late) })
			defer timer.Stop()
			res, err := env.eng.Run(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p", Shell: "echo ran >> runs; cat runs"}))
			if err != nil || res.ExitCode != 0 || res.Stdout != "ran\n" {
				t.Fatalf("want one run after retries, got %+v, %v", res, err)
			}
		})
	}
}
