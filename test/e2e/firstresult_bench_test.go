package e2e

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkCreateToFirstResult is what an agent waits for at the start of a conversation: POST /v1/sandboxes
// with a warm pool, then at once the first command (`echo ok`), timed from the create's start to the command's
// result, one conversation at a time (AIRLOCK_BENCH_ROUNDS, default 20), each with the pool full and the node
// settled. Reported: p50 and p90 of the whole and of its two calls. Run: make bench-e2e.
func BenchmarkCreateToFirstResult(b *testing.B) {
	rounds := 20
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	g := gateway(b)
	ns, key := gatewayTenant(b, 50)
	ctx := context.Background()
	if err := k8s.DeleteAllOf(ctx, &airlockv1.SandboxTemplate{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	eventually(b, 10*time.Second, "template", func() error { return k8s.Create(ctx, poolTemplate(ns, "python-node")) })
	pool := &airlockv1.SandboxPool{}
	pool.Namespace, pool.Name, pool.Spec.TemplateRef.Name, pool.Spec.Replicas = ns, "python-node", "python-node", 2
	if err := k8s.Create(ctx, pool); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var total, create, first []time.Duration
		for range rounds {
			waitPoolReady(b, ns, "python-node", 2)
			settle(b)
			start := time.Now()
			status, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"template": "python-node", "timeout_minutes": 10})
			id, _ := created["id"].(string)
			if status != http.StatusCreated || id == "" || created["status"] != "ready" || created["start"] != "warm" {
				b.Fatalf("create: %d %v", status, created)
			}
			made := time.Now()
			status, res := g.call(b, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "echo ok"})
			done := time.Now()
			if status != http.StatusOK || res["stdout"] != "ok\n" {
				b.Fatalf("first command: %d %v", status, res)
			}
			total, create, first = append(total, done.Sub(start)), append(create, made.Sub(start)), append(first, done.Sub(made))
			g.call(b, key, "DELETE", "/v1/sandboxes/"+id, nil)
		}
		for _, m := range []struct {
			name string
			d    []time.Duration
		}{{"create-to-result", total}, {"create", create}, {"first-command", first}} {
			b.ReportMetric(float64(benchstat.Percentile(m.d, 50).Microseconds())/1000, m.name+"-p50-ms")
			b.ReportMetric(float64(benchstat.Percentile(m.d, 90).Microseconds())/1000, m.name+"-p90-ms")
			b.Logf("%s: p50 %s p90 %s (%s–%s, %d); load %s", m.name, benchstat.Percentile(m.d, 50), benchstat.Percentile(m.d, 90),
				benchstat.Percentile(m.d, 0), benchstat.Percentile(m.d, 100), len(m.d), benchstat.LoadAvg())
		}
	}
}
