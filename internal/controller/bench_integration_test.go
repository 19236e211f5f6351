package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/benchstat"
	"airlock.dev/airlock/internal/testutil/child"
)

// benchEnvInt reads a positive integer setting of the benchmark.
func benchEnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchRound is one side's measurement of one repetition.
type benchRound struct {
	total   time.Duration   // first create until the last object is done
	latency []time.Duration // per object: its create call until it is done
	writes  float64         // API write requests (POST, PUT, PATCH, APPLY, DELETE) per object
	reads   float64         // other API requests per object
	cpu     time.Duration   // the manager's CPU time over the round
	load    string          // /proc/loadavg when the round ended
}

// BenchmarkCreateSandboxes compares, on envtest with the real manager binary as its own process, creating N
// Sandboxes until each has its pod, its NetworkPolicy and the status write that records the pod, against
// creating N pods + N policies directly, at the same client concurrency and rate limits. Both sides observe
// "done" the same way (a watch on the namespace, no polling) and alternate, A B A B…, for
// AIRLOCK_BENCH_REPS repetitions (default 5) of AIRLOCK_BENCH_COUNT objects (default 1,000); everything a
// round created is deleted, and the deletion awaited, before the next. The manager runs with
// AIRLOCK_BENCH_WORKERS reconcile workers (default 32, its own default). Run with `make bench-envtest`.
// Reported: the totals' medians and their ratio, per-object p50/p90, API requests per object (from the API
// server's apiserver_request_total), and the manager's CPU time and peak RSS.
func BenchmarkCreateSandboxes(b *testing.B) {
	cfg, c := startEnv(b)
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	n, reps, workers := benchEnvInt("AIRLOCK_BENCH_COUNT", 1000), benchEnvInt("AIRLOCK_BENCH_REPS", 5), 8
	// As installed (config/admission): Sandboxes get their finalizer at admission. AIRLOCK_BENCH_NO_POLICY=1
	// measures the manager adding it with a patch of its own, as on clusters before Kubernetes 1.36.
	if os.Getenv("AIRLOCK_BENCH_NO_POLICY") == "" {
		installFinalizerPolicy(b, c, "airlock-sandbox-finalizer", "")
	}
	mgr := startManagerProcess(b)
	// Warm up: the manager's caches are synced once it has reconciled a first sandbox.
	warm := newNamespace(b, c)
	runRound(b, cfg, c, wc, mgr, warm, 1, 1, true)

	var direct, viaSandboxes []benchRound
	for b.Loop() {
		for rep := range reps {
			direct = append(direct, runRound(b, cfg, c, wc, mgr, newNamespace(b, c), n, workers, false))
			viaSandboxes = append(viaSandboxes, runRound(b, cfg, c, wc, mgr, newNamespace(b, c), n, workers, true))
			d, s := direct[rep], viaSandboxes[rep]
			b.Logf("rep %d: direct %s (p50 %s p90 %s, %.2f writes + %.2f other requests per object); sandboxes %s (p50 %s p90 %s, %.2f writes + %.2f other requests per sandbox, manager CPU %s); ratio %.2f; load %s",
				rep+1, d.total.Round(time.Millisecond), benchstat.Percentile(d.latency, 50), benchstat.Percentile(d.latency, 90), d.writes, d.reads,
				s.total.Round(time.Millisecond), benchstat.Percentile(s.latency, 50), benchstat.Percentile(s.latency, 90), s.writes, s.reads, s.cpu, s.total.Seconds()/d.total.Seconds(), s.load)
		}
	}
	peak := mgr.peakRSS(b)
	totals := func(rs []benchRound) []time.Duration {
		out := make([]time.Duration, len(rs))
		for i, r := range rs {
			out[i] = r.total
		}
		return out
	}
	pooled := func(rs []benchRound) []time.Duration {
		var out []time.Duration
		for _, r := range rs {
			out = append(out, r.latency...)
		}
		return out
	}
	var ratios []float64
	var cpu time.Duration
	for i := range direct {
		ratios = append(ratios, viaSandboxes[i].total.Seconds()/direct[i].total.Seconds())
		cpu += viaSandboxes[i].cpu
	}
	slices.Sort(ratios)
	dt, st := totals(direct), totals(viaSandboxes)
	ratio := benchstat.Percentile(st, 50).Seconds() / benchstat.Percentile(dt, 50).Seconds()
	cpuPer1000 := cpu.Seconds() / float64(len(direct)*n) * 1000
	b.ReportMetric(benchstat.Percentile(dt, 50).Seconds(), "direct-s")
	b.ReportMetric(benchstat.Percentile(st, 50).Seconds(), "sandbox-s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(benchstat.Percentile(pooled(viaSandboxes), 50).Milliseconds()), "sandbox-p50-ms")
	b.ReportMetric(float64(benchstat.Percentile(pooled(viaSandboxes), 90).Milliseconds()), "sandbox-p90-ms")
	b.ReportMetric(viaSandboxes[len(viaSandboxes)-1].writes, "writes/sandbox")
	b.ReportMetric(cpuPer1000, "manager-cpu-s/1000")
	b.ReportMetric(float64(peak)/(1<<20), "manager-peak-MiB")
	b.Logf("%d reps of %d: direct total p50 %s (min %s, max %s), per object p50 %s p90 %s; sandboxes total p50 %s (min %s, max %s), per sandbox p50 %s p90 %s; ratio of medians %.2f (per rep %.2f..%.2f); manager CPU %.1f s per 1,000 sandboxes, peak RSS %d MiB",
		len(direct), n, benchstat.Percentile(dt, 50), benchstat.Percentile(dt, 0), benchstat.Percentile(dt, 100), benchstat.Percentile(pooled(direct), 50), benchstat.Percentile(pooled(direct), 90),
		benchstat.Percentile(st, 50), benchstat.Percentile(st, 0), benchstat.Percentile(st, 100), benchstat.Percentile(pooled(viaSandboxes), 50), benchstat.Percentile(pooled(viaSandboxes), 90),
		ratio, ratios[0], ratios[len(ratios)-1], cpuPer1000, peak>>20)
}

// runRound creates n objects in ns with the given concurrency, directly (a policy then a pod, as the
// controller does) or as Sandboxes, and measures until a watch has seen each one done; then it deletes them.
func runRound(b *testing.B, cfg *rest.Config, c client.Client, wc client.WithWatch, mgr *managerProcess, ns string, n, workers int, viaSandboxes bool) benchRound {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
	}
	done := watchDone(b, ctx, wc, ns, n, viaSandboxes)
	before, cpuBefore := apiRequests(b, cfg), mgr.cpuTime(b)
	started := make([]time.Time, n)
	begin := time.Now()
	parallel(b, n, workers, func(i int) error {
		started[i] = time.Now()
		s := makeSandbox(ns, names[i]).image("img:1").obj()
		if viaSandboxes {
			return c.Create(ctx, s)
		}
		r, err := sandbox.Resolve(s, nil, sandbox.DefaultDefaults())
		if err != nil {
			return err
		}
		if err := c.Create(ctx, sandbox.BuildNetworkPolicy(s, r.Network, nil)); err != nil {
			return err
		}
		return c.Create(ctx, sandbox.BuildPod(s, r, sandbox.DefaultPodOptions("init:1")))
	})
	var finished map[string]time.Time
	select {
	case finished = <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d objects not done after 10 minutes", n)
	}
	r := benchRound{cpu: mgr.cpuTime(b) - cpuBefore}
	for i, name := range names {
		d := finished[name].Sub(started[i])
		r.latency = append(r.latency, d)
		r.total = max(r.total, finished[name].Sub(begin))
	}
	time.Sleep(2 * time.Second) // writes that trail "done" (e.g. a second status write) count too
	after := apiRequests(b, cfg)
	r.writes, r.reads = (after.Writes-before.Writes)/float64(n), (after.Other-before.Other)/float64(n)
	r.load = benchstat.LoadAvg()
	deleteRound(b, c, ns, viaSandboxes)
	return r
}

// watchDone watches ns and sends, once all n objects are done, when each was: its pod and policy exist and,
// for a Sandbox, its status names the pod.
func watchDone(b *testing.B, ctx context.Context, wc client.WithWatch, ns string, n int, viaSandboxes bool) <-chan map[string]time.Time {
	b.Helper()
	type seen struct {
		name string
		part int
	}
	events := make(chan seen, 1024)
	parts := 2
	watchInto := func(list client.ObjectList, part int, isDone func(watch.Event) (string, bool)) {
		w, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			b.Fatalf("watching: %v", err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if name, ok := isDone(ev); ok {
					select {
					case events <- seen{name, part}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	metaAdded := func(ev watch.Event) (string, bool) {
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok || ev.Type != watch.Added {
			return "", false
		}
		return m.Name, true
	}
	watchInto(metaListOf("Pod", corev1.SchemeGroupVersion), 0, metaAdded)
	watchInto(metaListOf("NetworkPolicy", networkingv1.SchemeGroupVersion), 1, metaAdded)
	if viaSandboxes {
		parts = 3
		watchInto(&airlockv1.SandboxList{}, 2, func(ev watch.Event) (string, bool) {
			s, ok := ev.Object.(*airlockv1.Sandbox)
			if !ok || ev.Type == watch.Deleted || s.Status.PodName == "" {
				return "", false
			}
			return s.Name, true
		})
	}
	out := make(chan map[string]time.Time, 1)
	go func() {
		got := map[string]int{}
		at := map[string]time.Time{}
		for len(at) < n {
			select {
			case ev := <-events:
				if got[ev.name]&(1<<ev.part) != 0 {
					continue
				}
				if got[ev.name] |= 1 << ev.part; got[ev.name] == 1<<parts-1 {
					at[ev.name] = time.Now()
				}
			case <-ctx.Done():
				return
			}
		}
		out <- at
	}()
	return out
}

func metaListOf(kind string, gv schema.GroupVersion) *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gv.WithKind(kind + "List"))
	return list
}

// deleteRound deletes what a round created and waits until it is gone: Sandboxes through the manager's
// finalizer, direct pods and policies at once (envtest has no kubelet, and unscheduled pods go at once).
func deleteRound(b *testing.B, c client.Client, ns string, viaSandboxes bool) {
	b.Helper()
	ctx := context.Background()
	if viaSandboxes {
		if err := c.DeleteAllOf(ctx, &airlockv1.Sandbox{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
	} else {
		if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		if err := c.DeleteAllOf(ctx, &networkingv1.NetworkPolicy{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
	}
	for end := time.Now().Add(10 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		left := 0
		for _, kind := range []struct {
			kind string
			gv   schema.GroupVersion
		}{{"Pod", corev1.SchemeGroupVersion}, {"NetworkPolicy", networkingv1.SchemeGroupVersion}, {"Sandbox", airlockv1.GroupVersion}} {
			list := metaListOf(kind.kind, kind.gv)
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				b.Fatalf("listing %s: %v", kind.kind, err)
			}
			left += len(list.Items)
		}
		if left == 0 {
			return
		}
		if time.Now().After(end) {
			b.Fatalf("namespace %s: %d objects left 10 minutes after the delete", ns, left)
		}
	}
}

// apiRequests reads the API server's request counters.
func apiRequests(b *testing.B, cfg *rest.Config) benchstat.Requests {
	b.Helper()
	r, err := benchstat.APIRequests(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func parallel(b *testing.B, n, workers int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

type managerProcess struct{ cmd *exec.Cmd }

// startManagerProcess builds cmd/manager and runs it against envtest until the benchmark ends.
func startManagerProcess(b *testing.B) *managerProcess {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "manager")
	if out, err := exec.Command("go", "build", "-o", bin, "airlock.dev/airlock/cmd/manager").CombinedOutput(); err != nil {
		b.Fatalf("building manager: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(bin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--workers="+strconv.Itoa(benchEnvInt("AIRLOCK_BENCH_WORKERS", 32)), "--zap-log-level=error",
		"--kube-api-qps=1000", "--kube-api-burst=2000"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return &managerProcess{cmd: cmd}
}

// peakRSS is the manager's high-water resident set size (VmHWM).
func (m *managerProcess) peakRSS(b *testing.B) int64 {
	v, err := benchstat.PeakRSS(m.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// cpuTime is the manager's user + system CPU time so far.
func (m *managerProcess) cpuTime(b *testing.B) time.Duration {
	v, err := benchstat.CPUTime(m.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
