package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkExecFanout is fan-out throughput: M `true` commands spread over 4 sandboxes in 4 tenants (so no
// tenant's limit is what binds), run by C workers, through the gateway and with plain client-go, at C = 1, 5,
// 20, 50. Per concurrency the two ways alternate (gateway, client-go, gateway, client-go...) for `reps`
// repetitions; reported: commands/s (median of the repetitions), p50/p99 latency over all calls, the CPU seconds
// the gateway and the API server used, and the gateway's RSS. Run: make bench-e2e.
func BenchmarkExecFanout(b *testing.B) {
	const tenants, perTenant = 4, 1 // the 2-core node has room for few small sandboxes besides the rest
	commands := envInt("AIRLOCK_BENCH_FANOUT_COMMANDS", 100)
	reps := envInt("AIRLOCK_BENCH_FANOUT_REPS", 3)
	for b.Loop() {
		g := gateway(b)
		rc, err := restClient()
		if err != nil {
			b.Fatal(err)
		}
		type target struct{ ns, key, id string }
		var targets []target
		for range tenants {
			ns, key := gatewayTenant(b, perTenant)
			for range perTenant {
				status, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
				id, _ := created["id"].(string)
				if status != http.StatusCreated || id == "" || created["status"] != "ready" {
					b.Fatalf("create: %d %v", status, created)
				}
				targets = append(targets, target{ns, key, id})
			}
		}
		ctx := context.Background()
		ways := map[string]func(t target) error{
			"gateway": func(t target) error {
				status, res, err := g.try(t.key, "POST", "/v1/sandboxes/"+t.id+"/exec", map[string]any{"argv": []string{"true"}})
				switch {
				case err == nil && (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests):
					err = fmt.Errorf("%w: status %d %v", errTransient, status, res)
				case err == nil && (status != http.StatusOK || res["exit_code"] != float64(0)):
					err = fmt.Errorf("status %d %v", status, res)
				}
				return err
			},
			"client-go": func(t target) error {
				err := rawExec(ctx, rc, t.ns, t.id, nil, "true")
				if err != nil && strings.Contains(err.Error(), "failed to exec in container") {
					err = fmt.Errorf("%w: %w", errTransient, err)
				}
				return err
			},
		}
		apiPID := apiServerPID()
		for _, c := range []int{1, 5, 20, 50} {
			type result struct {
				rates      []float64
				lat        []time.Duration
				gwCPU, api float64
				node       float64 // gVisor's sandboxes and their shims
				retries    int64
			}
			res := map[string]*result{"gateway": {}, "client-go": {}}
			for rep := range reps {
				for _, name := range []string{"gateway", "client-go"} {
					if rep%2 == 1 { // alternate which goes first
						name = map[string]string{"gateway": "client-go", "client-go": "gateway"}[name]
					}
					run := ways[name]
					gw0, api0, node0 := cpuSeconds(g.cmd.Process.Pid), cpuSeconds(apiPID), hostCPU("exe", "runsc", "containerd-shim")
					var next, retries atomic.Int64
					lats := make([][]time.Duration, c)
					errs := make(chan error, c)
					start := time.Now()
					var wg sync.WaitGroup
					for w := range c {
						wg.Go(func() {
							for {
								i := next.Add(1) - 1
								if i >= int64(commands) {
									return
								}
								t0 := time.Now()
								var err error
								for attempt := 0; attempt < 10; attempt++ {
									if err = run(targets[int(i)%len(targets)]); !errors.Is(err, errTransient) {
										break
									}
									retries.Add(1) // the node could not start it, nothing ran: retry as a client would
									time.Sleep(time.Second)
								}
								if err != nil {
									errs <- err
									return
								}
								lats[w] = append(lats[w], time.Since(t0))
							}
						})
					}
					wg.Wait()
					el := time.Since(start)
					close(errs)
					for err := range errs {
						b.Fatalf("%s at concurrency %d: %v", name, c, err)
					}
					r := res[name]
					r.rates = append(r.rates, float64(commands)/el.Seconds())
					for _, l := range lats {
						r.lat = append(r.lat, l...)
					}
					r.gwCPU += cpuSeconds(g.cmd.Process.Pid) - gw0
					r.api += cpuSeconds(apiPID) - api0
					r.node += hostCPU("exe", "runsc", "containerd-shim") - node0
					r.retries += retries.Load()
				}
			}
			for _, name := range []string{"gateway", "client-go"} {
				r := res[name]
				slices.Sort(r.rates)
				slices.Sort(r.lat)
				rate := r.rates[len(r.rates)/2]
				b.ReportMetric(rate, fmt.Sprintf("%s-c%d-cmd/s", name, c))
				b.Logf("c=%-2d %-9s %6.1f cmd/s (reps %v)  p50 %6.1f ms  p99 %6.1f ms  CPU s: gateway %.1f, API server %.1f, gVisor+shims %.1f; %d retried (runtime could not start)",
					c, name, rate, roundAll(r.rates), ms(r.lat[len(r.lat)/2]), ms(r.lat[len(r.lat)*99/100]), r.gwCPU, r.api, r.node, r.retries)
			}
			ratio := res["gateway"].rates[len(res["gateway"].rates)/2] / res["client-go"].rates[len(res["client-go"].rates)/2]
			b.ReportMetric(ratio, fmt.Sprintf("gateway/client-go-c%d", c))
			now, peak := g.rss(b)
			b.Logf("c=%-2d throughput gateway/client-go %.2f; gateway RSS %d MiB (peak %d MiB); load %s", c, ratio, now>>20, peak>>20, benchstat.LoadAvg())
		}
		for _, t := range targets {
			g.call(b, t.key, "DELETE", "/v1/sandboxes/"+t.id, nil)
		}
	}
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int(x*10)) / 10
	}
	return out
}

// cpuSeconds is a process's user+system CPU time so far, 0 if it cannot be read.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// errTransient marks a call the node's runtime could not start (nothing ran).
var errTransient = errors.New("not started, retry")

// hostCPU is the CPU time so far of every host process whose comm is one of comms (gVisor's sandbox and gofer
// processes show as "exe" or "runsc", their shims as "containerd-shim"); processes that ended meanwhile are
// not counted, which only makes the figure lower.
func hostCPU(comms ...string) float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	total := 0.0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || !slices.Contains(comms, strings.TrimSpace(string(b))) {
			continue
		}
		total += cpuSeconds(pid)
	}
	return total
}

// apiServerPID reads the local cluster's kube-apiserver pidfile (next to its kubeconfig), 0 if absent.
func apiServerPID() int {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(kubeconfig), "pids", "kube-apiserver.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
