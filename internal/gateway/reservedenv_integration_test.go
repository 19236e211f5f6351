package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestIntegrationReservedEnvIsRefused: a tenant cannot set Airlock's own variables. {"AIRLOCK_NODE_IP": ""} once
// emptied PID 1's --gate-host and skipped the network gate; {"AIRLOCK_MEMORY_GUARD": "off"} switched the memory
// guard off. Create refuses them (also when the tenant has a pool, whose claim binds the env late to every
// command), and the Go runtime's variables, which would reach PID 1; secrets and an exec's env refuse Airlock's
// names, while an exec's env may set GOGC for its command. Each answer is a 400 naming the field and the
// variable, and nothing is created. Without the gateway's checks the CRD's CEL rule still refuses the env, but
// its answer names no field, and the secret is taken: checked.
func TestIntegrationReservedEnvIsRefused(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	ctx := context.Background()
	pool := &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: ns},
		Spec: airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: "python-node"}, Replicas: 1}}
	if err := g.c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, field, name, why string }{
		{`{"env": {"AIRLOCK_NODE_IP": ""}, "wait": false}`, "env", "AIRLOCK_NODE_IP", "Airlock's own"},
		{`{"env": {"AIRLOCK_MEMORY_GUARD": "off"}, "wait": false}`, "env", "AIRLOCK_MEMORY_GUARD", "Airlock's own"},
		{`{"env": {"TASK": "1", "AIRLOCK_SUPERVISOR_SOCKET": "@mine"}, "wait": false}`, "env", "AIRLOCK_SUPERVISOR_SOCKET", "Airlock's own"},
		{`{"env": {"GOMEMLIMIT": "1MiB"}, "wait": false}`, "env", "GOMEMLIMIT", "exec request's env"},
		{`{"secrets": {"AIRLOCK_PROCESS_LIMIT": "100000"}, "wait": false}`, "secrets", "AIRLOCK_PROCESS_LIMIT", "Airlock's own"},
	} {
		code, body := g.do(t, key, "POST", "/v1/sandboxes", tc.body)
		if msg := errMessage(body); code != http.StatusBadRequest || errField(body) != tc.field ||
			!strings.HasPrefix(msg, tc.field+": "+tc.name+" is reserved") || !strings.Contains(msg, tc.why) {
			t.Errorf("create %s: %d %v, want 400 naming %s and %s, saying why", tc.body, code, body, tc.field, tc.name)
		}
	}
	var list airlockv1.SandboxList
	if err := g.c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("refused creates must create nothing: %d sandboxes, %v", len(list.Items), err)
	}
	// The refusals above were on the warm path: an allowed env names the pool.
	code, body := g.do(t, key, "POST", "/v1/sandboxes", `{"env": {"TASK": "1", "GOPATH": "/go"}, "wait": false}`)
	if code != http.StatusCreated {
		t.Fatalf("create with an allowed env: %d %v", code, body)
	}
	var sb airlockv1.Sandbox
	if err := g.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: idOf(body)}, &sb); err != nil || sb.Spec.PoolRef == nil || sb.Spec.PoolRef.Name != "warm" {
		t.Fatalf("the create should claim from pool warm: %+v %v", sb.Spec.PoolRef, err)
	}

	id := g.readySandbox(t, ns, t.TempDir())
	for _, env := range []string{`{"AIRLOCK_NODE_IP": "127.0.0.1"}`, `{"AIRLOCK_RUNWRAP_ROLE": "keeper"}`, `{"AIRLOCK_MEMORY_GUARD": "off"}`} {
		code, body := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "true", "env": `+env+`}`)
		if code != http.StatusBadRequest || errField(body) != "env" || !strings.Contains(errMessage(body), "is reserved") {
			t.Errorf("exec with env %s: %d %v, want 400 naming env", env, code, body)
		}
	}
	code, body = g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "printenv GOGC", "env": {"GOGC": "off"}}`)
	if code != http.StatusOK || body["stdout"] != "off\n" {
		t.Errorf("an exec's env may set the Go runtime's variables for its command: %d %v", code, body)
	}
}
