package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestReservedEnvIsRefused: on the cluster, neither the API server (the CRD's CEL rule) nor the gateway lets
// a sandbox set Airlock's own variables: {"AIRLOCK_NODE_IP": ""} once made PID 1 skip its network gate, and
// {"AIRLOCK_MEMORY_GUARD": "off"} let a memory bomb OOM-kill the sandbox (issue 26).
func TestReservedEnvIsRefused(t *testing.T) {
	ns := newTenant(t)
	for _, e := range []airlockv1.EnvVar{{Name: "AIRLOCK_NODE_IP"}, {Name: "AIRLOCK_MEMORY_GUARD", Value: "off"}} {
		s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reserved"},
			Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}, Env: []airlockv1.EnvVar{e}}}
		if err := k8s.Create(context.Background(), s); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), e.Name+" is reserved") {
			t.Errorf("Sandbox with env %s: got %v, want Invalid naming the variable", e.Name, err)
		}
	}
	g := gateway(t)
	_, key := gatewayTenant(t, 5)
	for _, env := range []map[string]string{{"AIRLOCK_NODE_IP": ""}, {"AIRLOCK_MEMORY_GUARD": "off"}} {
		code, body := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"env": env, "wait": false})
		if e, _ := body["error"].(map[string]any); code != http.StatusBadRequest || e["field"] != "env" {
			t.Errorf("gateway create with env %v: %d %v, want 400 naming env", env, code, body)
		}
	}
}

// TestProcessLimitFollowsTheHandler: a RuntimeClass of any name whose handler is runsc is gVisor: its sandbox
// proves gVisor and gets the process limit (AIRLOCK_PROCESS_LIMIT in its env), which was once decided by the
// class's name "gvisor" alone.
func TestProcessLimitFollowsTheHandler(t *testing.T) {
	ctx := context.Background()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sandboxed"}, Handler: "runsc"}
	if err := k8s.Create(ctx, rc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating RuntimeClass: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), rc) })
	ns := newTenant(t)
	tpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandboxed"},
		Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: rc.Name}}
	if err := k8s.Create(ctx, tpl); err != nil {
		t.Fatalf("creating template: %v", err)
	}
	createSandbox(t, ns, "named", withTemplate("sandboxed"))
	s := waitReady(t, ns, "named")
	if s.Status.RuntimeHandler != "runsc" || s.Status.Isolation != airlockv1.IsolationGVisor {
		t.Errorf("class %s with handler runsc: handler %q isolation %q, want runsc and gvisor", rc.Name, s.Status.RuntimeHandler, s.Status.Isolation)
	}
	if r := sh(t, ns, "named", "printenv AIRLOCK_PROCESS_LIMIT", 20*time.Second); strings.TrimSpace(r.Stdout) != "256" {
		t.Errorf("the process limit under handler runsc: %+v, want 256", r)
	}
}
