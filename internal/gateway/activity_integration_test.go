package gateway

import (
	"context"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestIntegrationActivityCoalescesPatches: execs and file transfers back to back for T seconds cost at most
// ceil(T/N)+1 patches of their sandbox's status (N the flush interval), and status.lastActivityAt moves with
// them.
func TestIntegrationActivityCoalescesPatches(t *testing.T) {
	const interval, span = time.Second, 4 * time.Second
	var patches atomic.Int64
	c, err := client.NewWithWatch(startEnv(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	counted := interceptor.NewClient(c, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			patches.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	g := newGateway(t, func(o *Options) {
		a, err := NewActivity(counted, interval, clock.RealClock{}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		o.Activity = a
	})
	ns, key := g.tenant(t, 20)
	id := g.readySandbox(t, ns, t.TempDir())
	lastActivity := func() *metav1.Time {
		var sb airlockv1.Sandbox
		if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: id}, &sb); err != nil {
			t.Fatal(err)
		}
		return sb.Status.LastActivityAt
	}
	if lastActivity() != nil {
		t.Fatal("lastActivityAt set before any activity")
	}

	start := time.Now()
	calls := 0
	var mid *metav1.Time
	for time.Since(start) < span {
		if calls%5 == 4 {
			if code, body := g.do(t, key, "PUT", "/v1/sandboxes/"+id+"/files?path=f.txt", "x"); code != http.StatusOK {
				t.Fatalf("put: %d %v", code, body)
			}
		} else if code, body := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "true"}`); code != http.StatusOK {
			t.Fatalf("exec: %d %v", code, body)
		}
		calls++
		if mid == nil && time.Since(start) > span/2 {
			mid = lastActivity()
		}
	}
	elapsed := time.Since(start)
	time.Sleep(2 * interval) // the last activity is written an interval after the previous write
	limit := int64(math.Ceil(elapsed.Seconds()/interval.Seconds())) + 1
	n := patches.Load()
	t.Logf("%d calls in %v: %d status patches (at most %d)", calls, elapsed.Round(time.Millisecond), n, limit)
	if calls < 20 || n < 2 || n > limit {
		t.Fatalf("%d calls in %v made %d status patches; want at most ceil(T/N)+1 = %d, and several", calls, elapsed, n, limit)
	}
	last := lastActivity()
	// metav1.Time has one-second precision: the last write says the second of the last call.
	if mid == nil || last == nil || !last.After(mid.Time) || last.Time.Before(start.Add(elapsed).Add(-time.Second).Truncate(time.Second)) {
		t.Fatalf("lastActivityAt %v (mid-run %v) does not follow the calls that ended at %v", last, mid, start.Add(elapsed))
	}
}

// TestIntegrationCreateIdleTimeout: idle_timeout_minutes becomes spec.idleTimeout; one longer than the timeout
// (asked for, or the template's default) is a 400 naming the field.
func TestIntegrationCreateIdleTimeout(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	code, body := g.do(t, key, "POST", "/v1/sandboxes", `{"timeout_minutes": 60, "idle_timeout_minutes": 10, "wait": false}`)
	if code != http.StatusCreated || body["idle_timeout_minutes"] != 10.0 {
		t.Fatalf("create: %d %v", code, body)
	}
	var sb airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: body["id"].(string)}, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Spec.IdleTimeout == nil || sb.Spec.IdleTimeout.Duration != 10*time.Minute {
		t.Fatalf("spec.idleTimeout %v", sb.Spec.IdleTimeout)
	}
	if code, body = g.do(t, key, "POST", "/v1/sandboxes", `{"timeout_minutes": 10, "idle_timeout_minutes": 20}`); code != 400 || errField(body) != "idle_timeout_minutes" {
		t.Fatalf("idle over timeout: %d %v", code, body)
	}
	tmpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: ns},
		Spec: airlockv1.SandboxTemplateSpec{Image: "img", DefaultTimeout: &metav1.Duration{Duration: 15 * time.Minute}}}
	if err := g.c.Create(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	if code, body = g.do(t, key, "POST", "/v1/sandboxes", `{"template": "short", "idle_timeout_minutes": 20}`); code != 400 || errField(body) != "idle_timeout_minutes" {
		t.Fatalf("idle over the template's default timeout: %d %v", code, body)
	}
}
