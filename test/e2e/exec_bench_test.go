package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/runwrap"

	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkExecTrue is the cost of `true` in one gVisor sandbox, one call at a time, and where it goes. Each
// round runs every way once, in a rotated order (A, B, C... then B, C, A...), so drift and load hit all ways
// alike; rounds are enough for p50 and p90. The ways build on each other:
//   - client-go: plain remotecommand exec of `true` (the floor);
//   - go-start: exec of `airlock-init help` (one Go process start instead of a C one);
//   - handoff: `airlock-init ctl` listing PID 1's registry (Go start + unix-socket hand-off to PID 1 + reply);
//   - engine: a whole supervised run (adds the keeper, the command's start, pipes, output files, trailer);
//   - gateway: the same over HTTP (auth, tenancy, sandbox lookup, JSON);
//   - kubectl: `kubectl exec` for reference.
//
// Then 20 concurrent calls through the gateway. Run: make bench-e2e.
func BenchmarkExecTrue(b *testing.B) {
	rounds := envInt("AIRLOCK_BENCH_ROUNDS", 60)
	for b.Loop() {
		g := gateway(b)
		ns, key := gatewayTenant(b, 20)
		_, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
		id, _ := created["id"].(string)
		if id == "" {
			b.Fatalf("create: %v", created)
		}
		rc, err := restClient()
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		tgt, err := target(ctx, ns, id)
		if err != nil {
			b.Fatal(err)
		}
		run := tgt
		run.Argv = []string{"true"}
		var timings []runwrap.Timings // the keeper's, of the engine's runs
		ways := []way{
			{"client-go", func() error { return rawExec(ctx, rc, ns, id, nil, "true") }},
			{"go-start", func() error { return rawExec(ctx, rc, ns, id, nil, podexec.DefaultWrapperPath, "help") }},
			{"session", func() error { // an exec of the connect client, the TLS handshake, one control call
				_, err := engine.Control(ctx, tgt, runwrap.Request{Op: runwrap.OpList})
				return err
			}},
			{"engine", func() error {
				res, err := engine.Run(ctx, run)
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				if err == nil && res.Trailer != nil && res.Trailer.Timings != nil {
					timings = append(timings, *res.Trailer.Timings)
				}
				return err
			}},
			{"gateway", func() error {
				status, res := g.call(b, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
				if status != http.StatusOK || res["exit_code"] != float64(0) {
					return fmt.Errorf("status %d %v", status, res)
				}
				return nil
			}},
			{"kubectl", func() error {
				return exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "-n", ns, "exec", id, "-c", "sandbox", "--", "true").Run()
			}},
		}
		st := interleave(b, rounds, ways)
		base := st["client-go"]
		for _, w := range ways {
			s := st[w.name]
			b.ReportMetric(ms(s.p50), w.name+"-p50-ms")
			b.ReportMetric(ms(s.p90), w.name+"-p90-ms")
			b.Logf("%-9s p50 %6.1f ms  p90 %6.1f ms  min %6.1f  max %6.1f  ratio p50 %.2f  p90 %.2f",
				w.name, ms(s.p50), ms(s.p90), ms(s.min), ms(s.max), ms(s.p50)/ms(base.p50), ms(s.p90)/ms(base.p90))
		}
		b.ReportMetric(ms(st["gateway"].p50)/ms(base.p50), "gateway/client-go-p50")
		b.ReportMetric(ms(st["gateway"].p90)/ms(base.p90), "gateway/client-go-p90")
		b.Logf("breakdown (p50): go start vs C %+.1f ms, session (hand-off, TLS, a control call) %+.1f ms, keeper+command %+.1f ms, HTTP layer %+.1f ms; load %s",
			ms(st["go-start"].p50-base.p50), ms(st["session"].p50-st["go-start"].p50),
			ms(st["engine"].p50-st["session"].p50), ms(st["gateway"].p50-st["engine"].p50), benchstat.LoadAvg())

		if len(timings) > 0 {
			p50 := func(f func(runwrap.Timings) int64) float64 {
				v := make([]int64, len(timings))
				for i, t := range timings {
					v[i] = f(t)
				}
				slices.Sort(v)
				return float64(v[len(v)/2]) / 1000
			}
			b.Logf("inside the keeper (p50 ms from receiving the run): files %.1f, command started %.1f, exited %.1f, pipes drained %.1f, done %.1f",
				p50(func(t runwrap.Timings) int64 { return t.FilesUS }), p50(func(t runwrap.Timings) int64 { return t.StartedUS }),
				p50(func(t runwrap.Timings) int64 { return t.ExitedUS }), p50(func(t runwrap.Timings) int64 { return t.DrainedUS }),
				p50(func(t runwrap.Timings) int64 { return t.DoneUS }))
		}

		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() {
				status, res, err := g.try(key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
				if err != nil {
					errs <- err
				} else if status != http.StatusOK {
					errs <- fmt.Errorf("status %d %v", status, res)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("concurrent exec: %v", err)
		}
		conc := time.Since(start)
		b.ReportMetric(conc.Seconds(), "20-concurrent-s")
		b.Logf("20 concurrent via gateway %s", conc.Round(time.Millisecond))
	}
}

// way is one of the things a benchmark compares.
type way struct {
	name string
	run  func() error
}

type stats struct{ p50, p90, min, max time.Duration }

// interleave runs every way once per round, rotating the order each round, and returns each way's stats.
func interleave(b *testing.B, rounds int, ways []way) map[string]stats {
	b.Helper()
	d := make(map[string][]time.Duration, len(ways))
	for r := range rounds {
		for k := range ways {
			w := ways[(r+k)%len(ways)]
			start := time.Now()
			if err := w.run(); err != nil {
				b.Fatalf("%s (round %d): %v", w.name, r, err)
			}
			d[w.name] = append(d[w.name], time.Since(start))
		}
	}
	out := make(map[string]stats, len(ways))
	for name, v := range d {
		slices.Sort(v)
		out[name] = stats{p50: v[len(v)/2], p90: v[len(v)*9/10], min: v[0], max: v[len(v)-1]}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// rawExec runs argv in the pod's sandbox container with plain client-go (WebSocket), stdin if given.
func rawExec(ctx context.Context, rc rest.Interface, ns, pod string, stdin io.Reader, argv ...string) error {
	req := rc.Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, kscheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	var out bytes.Buffer
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &out})
}

// restClient is a plain core/v1 REST client for building exec URLs.
func restClient() (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = kscheme.Codecs.WithoutConversion()
	return rest.RESTClientFor(c)
}
