package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// withActivity gives the gateway an activity recorder that flushes every interval, for the test's life.
func withActivity(t *testing.T, interval time.Duration) func(*Options) {
	return func(o *Options) {
		a, err := NewActivity(o.Client, interval, clock.RealClock{}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		o.Activity = a
	}
}

// startRenewer runs the gateway's background renewer every interval, for the test's life.
func startRenewer(t *testing.T, g *gw, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { g.srv.RenewBackground(ctx, interval, clock.RealClock{}); close(renewed) }()
	t.Cleanup(func() { cancel(); <-renewed })
}

// idleSandbox creates a Ready sandbox in ns that idles out after idle, and returns its name.
func idleSandbox(t *testing.T, g *gw, ns string, idle time.Duration) string {
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: ns},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}, WorkingDir: t.TempDir(),
			IdleTimeout: &metav1.Duration{Duration: idle}}}
	if err := g.c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	g.markReady(t, ns, sb.Name)
	return sb.Name
}

// idleDeadline is when sandbox ns/name idles out, as its status says now.
func idleDeadline(t *testing.T, g *gw, ns, name string, idle time.Duration) time.Time {
	var cur airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cur); err != nil {
		t.Fatal(err)
	}
	from := cur.Status.StartedAt.Time
	if a := cur.Status.LastActivityAt; a != nil && a.After(from) {
		from = a.Time
	}
	return from.Add(idle)
}

// staysAhead fails the test if sandbox ns/name's idle deadline passes within d.
func staysAhead(t *testing.T, g *gw, ns, name string, idle, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if at := idleDeadline(t, g, ns, name, idle); !time.Now().Before(at) {
			t.Fatalf("idle deadline %v of %s/%s passed while a background process ran", at.Format(time.RFC3339Nano), ns, name)
		}
	}
}

// A sandbox whose only activity is a background process does not idle out while it runs: the gateway asks the
// sandbox's PID 1 near the idle deadline and renews status.lastActivityAt; once the process is gone the renewals
// stop and the deadline passes.
func TestIntegrationBackgroundRenewsIdle(t *testing.T) {
	const interval, idle = time.Second, 4 * time.Second
	g := newGateway(t, withActivity(t, interval))
	startRenewer(t, g, interval)
	ns, key := g.tenant(t, 20)
	name := idleSandbox(t, g, ns, idle)

	status, proc := g.do(t, key, "POST", "/v1/sandboxes/"+name+"/exec", map[string]any{"command": "sleep 60", "background": true})
	if status != 202 {
		t.Fatalf("background start: %d %v", status, proc)
	}
	pid, _ := proc["process_id"].(string)
	// Three idle timeouts with nothing but the background process: the deadline stays ahead.
	staysAhead(t, g, ns, name, idle, 3*idle)
	if status, res := g.do(t, key, "DELETE", "/v1/sandboxes/"+name+"/processes/"+pid, nil); status != 200 {
		t.Fatalf("kill: %d %v", status, res)
	}
	// With the process gone nothing renews it: the deadline comes, and stays put.
	time.Sleep(idle + 2*interval)
	if d := idleDeadline(t, g, ns, name, idle); time.Now().Before(d) {
		t.Fatalf("idle deadline %v still ahead after the background process ended", d.Format(time.RFC3339Nano))
	}
}

// One tenant's hung sandboxes (PID 1 stopped, or a node that never answers the exec) do not delay the renewal of
// another tenant's sandbox whose background process runs: its idle deadline stays ahead. Fails with the
// sequential renewer (each hung check held up every later one for its whole timeout): checked.
func TestIntegrationHungSandboxesDoNotDelayOthersRenewal(t *testing.T) {
	const interval, idle = time.Second, 4 * time.Second
	router := newExecRouter(t)
	g := newGateway(t, func(o *Options) {
		withActivity(t, interval)(o)
		engine, err := podexec.New(router.RESTConfig(), podexec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		o.Engine = engine
	})
	router.setDefault(g.exec.URL)
	hung, silent := startHungNode(t), startSilentNode(t)

	hostile, _ := g.tenant(t, 20)
	for i := range 2 * renewChecksPerTenant {
		name := idleSandbox(t, g, hostile, idle)
		g.setSupervisorKey(t, hostile, name, hung.SupervisorKey())
		if i%2 == 0 {
			router.route(hostile, name, hung.URL)
		} else {
			router.route(hostile, name, silent)
		}
	}
	ns, key := g.tenant(t, 20)
	name := idleSandbox(t, g, ns, idle)
	if status, proc := g.do(t, key, "POST", "/v1/sandboxes/"+name+"/exec", map[string]any{"command": "sleep 60", "background": true}); status != 202 {
		t.Fatalf("background start: %d %v", status, proc)
	}
	startRenewer(t, g, interval)
	staysAhead(t, g, ns, name, idle, 4*idle)
}
