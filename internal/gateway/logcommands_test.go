package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// okEngine answers every command with exit 0.
type okEngine struct{}

func (okEngine) Stream(context.Context, podexec.Request, func(podexec.Chunk) error) (*podexec.Result, error) {
	return &podexec.Result{Outcome: podexec.OutcomeExited}, nil
}

// TestLogCommandsOffMeansOff: commands and env may carry secrets, so nothing of them reaches the gateway's log
// unless --log-commands asks for the command (env never). The whole log of a call is searched. Fails when the
// flag is ignored (checked once by logging commands unconditionally).
func TestLogCommandsOffMeansOff(t *testing.T) {
	const secretCmd, secretEnv = "echo TOPSECRET-CMD", "TOPSECRET-ENV"
	for _, on := range []bool{false, true} {
		var mu sync.Mutex
		var logged strings.Builder
		log := funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			logged.WriteString(prefix + " " + args + "\n")
		}, funcr.Options{Verbosity: 10})
		sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "s1"},
			Spec:   airlockv1.SandboxSpec{Image: "img"},
			Status: airlockv1.SandboxStatus{Phase: airlockv1.PhaseReady, PodName: "s1"}}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sb).WithStatusSubresource(sb).Build()
		s, err := New(Options{Client: c, Engine: okEngine{}, Auth: oneKey("good"), Logger: log, LogCommands: on})
		if err != nil {
			t.Fatal(err)
		}
		status, res := call(t, s.Handler(), http.MethodPost, "/v1/sandboxes/s1/exec",
			`{"command":"`+secretCmd+`","env":{"TOKEN":"`+secretEnv+`"}}`)
		if status != http.StatusOK {
			t.Fatalf("log-commands=%v: exec answered %d %v", on, status, res)
		}
		mu.Lock()
		out := logged.String()
		mu.Unlock()
		if !strings.Contains(out, "access") {
			t.Fatalf("log-commands=%v: no access line was logged, so the check below proves nothing:\n%s", on, out)
		}
		if got := strings.Contains(out, secretCmd); got != on {
			t.Errorf("log-commands=%v: command in the log = %v:\n%s", on, got, out)
		}
		if strings.Contains(out, secretEnv) {
			t.Errorf("log-commands=%v: an env value reached the log:\n%s", on, out)
		}
	}
}
