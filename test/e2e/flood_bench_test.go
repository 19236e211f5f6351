package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkCreateReadyUnderExecFlood asks whether an exec flood through the gateway slows the control plane:
// creation to Ready of a gVisor Sandbox, alternately on a quiet machine and during a 50-way flood (50 clients
// running `true` back to back through the gateway, over 3 tenants so that the per-tenant limit does not hold
// them back). Rounds alternate quiet, flood, quiet, flood... so that drift and other load hit both alike; the
// flood is under way (every client has finished a call) before its create starts, and the machine gets a few
// seconds to settle after it. Meanwhile a probe times GETs of the API server every 100 ms, to tell a slow API
// server from a busy node. Reports p50 and p90 of each, their ratios (goal: flood within 2x quiet), the
// spread, the flood's rate, refusals and failures, and the 1-minute load average. Run: make bench-e2e
// (AIRLOCK_BENCH_ROUNDS sets the rounds, 12 by default).
func BenchmarkCreateReadyUnderExecFlood(b *testing.B) {
	const clients, tenants, settle = 50, 3, 5 * time.Second
	rounds := envInt("AIRLOCK_BENCH_ROUNDS", 12)
	for b.Loop() {
		g := gateway(b)
		var targets []floodTarget
		for range tenants {
			_, key := gatewayTenant(b, 5)
			status, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
			id, _ := created["id"].(string)
			if status != http.StatusCreated || id == "" {
				b.Fatalf("create: %d %v", status, created)
			}
			targets = append(targets, floodTarget{key, id})
		}
		ns := benchNamespace(b)
		tmpl := benchTemplate(b, ns, "gvisor", airlockv1.InitFromImage)
		var quiet, flooded, quietAPI, floodAPI []time.Duration
		var quietLoad, floodLoad []string
		var total floodCount
		measure := func(name string, ready, api *[]time.Duration, load *[]string) {
			stop := probeAPI(ns, api)
			took, _ := sandboxReady(b, ns, name, tmpl)
			*ready = append(*ready, took)
			stop()
			*load = append(*load, strings.Fields(benchstat.LoadAvg())[0])
		}
		for i := range rounds {
			measure(fmt.Sprintf("quiet-%d", i), &quiet, &quietAPI, &quietLoad)
			f := startFlood(g, targets, clients)
			if !f.warm(30 * time.Second) {
				f.stop()
				b.Fatalf("round %d: the flood did not get going within 30s: %s", i, &f.count)
			}
			measure(fmt.Sprintf("flood-%d", i), &flooded, &floodAPI, &floodLoad)
			f.stop()
			total.add(&f.count)
			time.Sleep(settle)
		}
		if total.ok.Load() == 0 {
			b.Fatalf("the flood ran no command: %s; first error: %v", &total, total.firstErr())
		}
		q, fl := durationStats(quiet), durationStats(flooded)
		qa, fa := durationStats(quietAPI), durationStats(floodAPI)
		b.ReportMetric(ms(q.p50), "quiet-p50-ms")
		b.ReportMetric(ms(q.p90), "quiet-p90-ms")
		b.ReportMetric(ms(fl.p50), "flood-p50-ms")
		b.ReportMetric(ms(fl.p90), "flood-p90-ms")
		b.ReportMetric(fl.p50.Seconds()/q.p50.Seconds(), "p50-ratio")
		b.ReportMetric(fl.p90.Seconds()/q.p90.Seconds(), "p90-ratio")
		b.ReportMetric(ms(fa.p90), "flood-api-get-p90-ms")
		b.ReportMetric(float64(total.ok.Load())/total.active.Seconds(), "flood-execs/s")
		b.ReportMetric(float64(total.errs.Load()), "flood-failed")
		b.Logf("create->Ready over %d rounds each: quiet p50 %s p90 %s (spread %s-%s), during a %d-way exec flood p50 %s p90 %s (spread %s-%s); ratio p50 %.2f p90 %.2f (goal <= 2)",
			rounds, q.p50.Round(time.Millisecond), q.p90.Round(time.Millisecond), q.min.Round(time.Millisecond), q.max.Round(time.Millisecond),
			clients, fl.p50.Round(time.Millisecond), fl.p90.Round(time.Millisecond), fl.min.Round(time.Millisecond), fl.max.Round(time.Millisecond),
			fl.p50.Seconds()/q.p50.Seconds(), fl.p90.Seconds()/q.p90.Seconds())
		b.Logf("API server GET meanwhile: quiet p50 %.1f ms p90 %.1f ms, flood p50 %.1f ms p90 %.1f ms (%d and %d probes)",
			ms(qa.p50), ms(qa.p90), ms(fa.p50), ms(fa.p90), len(quietAPI), len(floodAPI))
		b.Logf("flood: %s over %s, %.0f execs/s; first failure: %v", &total, total.active.Round(time.Millisecond),
			float64(total.ok.Load())/total.active.Seconds(), total.firstErr())
		b.Logf("1-minute load average after each quiet create %v, after each flood create %v", quietLoad, floodLoad)
	}
}

// probeAPI times a GET of namespace ns every 100 ms into d until stopped: the API server's own latency.
func probeAPI(ns string, d *[]time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			start := time.Now()
			if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); err == nil {
				*d = append(*d, time.Since(start))
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

type floodTarget struct{ key, id string }

// floodCount tallies a flood's calls: answered, refused by a limit (429), failed.
type floodCount struct {
	ok, refused, errs atomic.Int64
	active            time.Duration
	mu                sync.Mutex
	err               error
}

func (c *floodCount) String() string {
	return fmt.Sprintf("%d execs answered, %d refused (429), %d failed", c.ok.Load(), c.refused.Load(), c.errs.Load())
}

func (c *floodCount) fail(err error) {
	c.errs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

func (c *floodCount) firstErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *floodCount) add(o *floodCount) {
	c.ok.Add(o.ok.Load())
	c.refused.Add(o.refused.Load())
	c.errs.Add(o.errs.Load())
	c.active += o.active
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = o.firstErr()
	}
}

// flood is clients goroutines running `true` through the gateway back to back until stopped.
type flood struct {
	count   floodCount
	started time.Time
	done    chan struct{}
	wg      sync.WaitGroup
	warmed  sync.WaitGroup
}

func startFlood(g *gatewayProc, targets []floodTarget, clients int) *flood {
	f := &flood{started: time.Now(), done: make(chan struct{})}
	f.warmed.Add(clients)
	for i := range clients {
		t := targets[i%len(targets)]
		f.wg.Go(func() {
			first := true
			for {
				select {
				case <-f.done:
					if first {
						f.warmed.Done()
					}
					return
				default:
				}
				status, res, err := g.try(t.key, "POST", "/v1/sandboxes/"+t.id+"/exec", map[string]any{"argv": []string{"true"}})
				switch {
				case err != nil:
					f.count.fail(err)
				case status == http.StatusTooManyRequests:
					f.count.refused.Add(1)
				case status != http.StatusOK || res["exit_code"] != float64(0):
					f.count.fail(fmt.Errorf("status %d %v", status, res))
				default:
					f.count.ok.Add(1)
				}
				if first {
					first = false
					f.warmed.Done()
				}
			}
		})
	}
	return f
}

// warm waits until every client has finished a call, and says whether they did within d.
func (f *flood) warm(d time.Duration) bool {
	done := make(chan struct{})
	go func() { f.warmed.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (f *flood) stop() {
	close(f.done)
	f.wg.Wait()
	f.count.active = time.Since(f.started)
}

// durationStats is the p50, p90 and spread of d (zero for none).
func durationStats(d []time.Duration) stats {
	if len(d) == 0 {
		return stats{}
	}
	v := slices.Clone(d)
	slices.Sort(v)
	return stats{p50: v[len(v)/2], p90: v[len(v)*9/10], min: v[0], max: v[len(v)-1]}
}
