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
)

// A sandbox whose only activity is a background process does not idle out while it runs: the gateway asks the
// sandbox's PID 1 near the idle deadline and renews status.lastActivityAt; once the process is gone the renewals
// stop and the deadline passes.
func TestIntegrationBackgroundRenewsIdle(t *testing.T) {
	const interval, idle = time.Second, 4 * time.Second
	g := newGateway(t, func(o *Options) {
		a, err := NewActivity(o.Client, interval, clock.RealClock{}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		o.Activity = a
	})
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { g.srv.RenewBackground(ctx, interval, clock.RealClock{}); close(renewed) }()
	t.Cleanup(func() { cancel(); <-renewed })

	ns, key := g.tenant(t, 20)
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: ns},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}, WorkingDir: t.TempDir(),
			IdleTimeout: &metav1.Duration{Duration: idle}}}
	if err := g.c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	g.markReady(t, ns, sb.Name)
	deadline := func() time.Time {
		var cur airlockv1.Sandbox
		if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: sb.Name}, &cur); err != nil {
			t.Fatal(err)
		}
		from := cur.Status.StartedAt.Time
		if a := cur.Status.LastActivityAt; a != nil && a.After(from) {
			from = a.Time
		}
		return from.Add(idle)
	}

	status, proc := g.do(t, key, "POST", "/v1/sandboxes/"+sb.Name+"/exec", map[string]any{"command": "sleep 60", "background": true})
	if status != 202 {
		t.Fatalf("background start: %d %v", status, proc)
	}
	pid, _ := proc["process_id"].(string)
	// Three idle timeouts with nothing but the background process: the deadline stays ahead.
	for end := time.Now().Add(3 * idle); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if d := deadline(); !time.Now().Before(d) {
			t.Fatalf("idle deadline %v passed while a background process ran", d.Format(time.RFC3339Nano))
		}
	}
	if status, res := g.do(t, key, "DELETE", "/v1/sandboxes/"+sb.Name+"/processes/"+pid, nil); status != 200 {
		t.Fatalf("kill: %d %v", status, res)
	}
	// With the process gone nothing renews it: the deadline comes, and stays put.
	time.Sleep(idle + 2*interval)
	d := deadline()
	if time.Now().Before(d) {
		t.Fatalf("idle deadline %v still ahead after the background process ended", d.Format(time.RFC3339Nano))
	}
}
