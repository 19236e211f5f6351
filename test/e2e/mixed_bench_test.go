package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkMixedOutputs: in each of S sandboxes (AIRLOCK_BENCH_SANDBOXES, default 4: what a 2-core node holds
// beside the rest), 20 commands at once through the gateway, interleaved: 10 that print 20 MB and 10 that print
// `ok`. A small command's latency under that load, against the same small commands alone (quiet, measured
// before and after), p50 and p90: one sandbox's session carries all its calls as independent HTTP/2 streams,
// so a big output must not hold up a small one's answer. Run: make bench-e2e.
func BenchmarkMixedOutputs(b *testing.B) {
	boxes := envInt("AIRLOCK_BENCH_SANDBOXES", 4)
	const perBox, bigBytes = 20, 20 << 20
	g, err := startGateway(fmt.Sprintf("--max-concurrent-execs=%d", boxes*perBox+10), fmt.Sprintf("--max-exec-streams=%d", boxes*perBox+10))
	if err != nil {
		b.Fatal(err)
	}
	defer g.stop()
	_, key := gatewayTenant(b, int64(boxes))
	ids := make([]string, boxes)
	for i := range ids {
		status, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
		if status != http.StatusCreated || created["status"] != "ready" {
			b.Fatalf("create: %d %v", status, created)
		}
		ids[i] = str(b, created, "id")
	}
	small := func(id string) (time.Duration, error) {
		t0 := time.Now()
		status, res, err := g.try(key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "echo ok"})
		if err == nil && (status != http.StatusOK || res["stdout"] != "ok\n") {
			err = fmt.Errorf("small: %d %v", status, res)
		}
		return time.Since(t0), err
	}
	quiet := func() []time.Duration {
		var d []time.Duration
		for range 3 {
			for _, id := range ids {
				t, err := small(id)
				if err != nil {
					b.Fatal(err)
				}
				d = append(d, t)
			}
		}
		return d
	}
	for b.Loop() {
		q := quiet()
		var mu sync.Mutex
		var loaded []time.Duration
		var wg sync.WaitGroup
		for _, id := range ids {
			for i := range perBox {
				wg.Go(func() {
					if i%2 == 0 {
						status, res, err := g.try(key, "POST", "/v1/sandboxes/"+id+"/exec",
							map[string]any{"command": fmt.Sprintf("yes | head -c %d", bigBytes), "timeout_ms": 120_000})
						if err != nil || status != http.StatusOK || res["stdout_bytes"] != float64(bigBytes) {
							b.Errorf("big: %d %v %v", status, summarize(res), err)
						}
						return
					}
					t, err := small(id)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					loaded = append(loaded, t)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		q = append(q, quiet()...)
		qp50, lp50, lp90 := benchstat.Percentile(q, 50), benchstat.Percentile(loaded, 50), benchstat.Percentile(loaded, 90)
		b.ReportMetric(float64(lp50.Milliseconds()), "small-loaded-p50-ms")
		b.ReportMetric(float64(lp90.Milliseconds()), "small-loaded-p90-ms")
		b.ReportMetric(float64(qp50.Milliseconds()), "small-quiet-p50-ms")
		b.ReportMetric(lp50.Seconds()/qp50.Seconds(), "loaded/quiet-p50")
		b.ReportMetric(lp90.Seconds()/benchstat.Percentile(q, 90).Seconds(), "loaded/quiet-p90")
		b.Logf("%d sandboxes × %d calls (half 20 MB, half `echo ok`): small p50 %s p90 %s loaded, %s / %s quiet; load %s",
			boxes, perBox, lp50, lp90, qp50, benchstat.Percentile(q, 90), benchstat.LoadAvg())
	}
}
