package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkWarmStart measures warm starts from a SandboxPool against cold starts in the same run, rounds
// interleaved (warm, cold, warm, cold…), at parallelism 1 and 20: a Sandbox CR to Ready (with spec.poolRef, or
// without it), and the gateway's POST /v1/sandboxes to 201 Ready (a template with a pool, or an identical one
// without). Both sides use the same image, runtime and resources; every round's sandboxes are deleted, and the
// deletions awaited, before the next round; every round starts with the pool full and the node's CPU settled
// (settle). Ready is seen through a watch, so that timing adds no polling load. AIRLOCK_BENCH_ROUNDS sets the
// rounds (default 20), AIRLOCK_BENCH_PARALLEL the parallelisms (default 1,20), AIRLOCK_BENCH_COLD=0 leaves out
// the cold rounds. Each round of rounds also has an "API floor" round (floorRound): the claim's writes alone.
func BenchmarkWarmStart(b *testing.B) {
	rounds := 20
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	g := gateway(b)
	ns, key := gatewayTenant(b, 200)
	ctx := context.Background()
	// The tenant's template is replaced by two identical small ones (a 2-core node holds 20 members of them),
	// one with a pool and one without.
	if err := k8s.DeleteAllOf(ctx, &airlockv1.SandboxTemplate{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"python-node", "python-node-cold"} {
		eventually(b, 10*time.Second, "template "+name, func() error { return k8s.Create(ctx, poolTemplate(ns, name)) })
	}
	// AIRLOCK_BENCH_COLD=0 leaves out the cold rounds: 20 cold gVisor starts at once next to 20 members are more
	// than the 2-core local node's containerd can do in the time allowed (docs/performance.md).
	cold := os.Getenv("AIRLOCK_BENCH_COLD") != "0"
	for _, par := range benchParallelism() {
		b.Run(fmt.Sprintf("parallel-%d", par), func(b *testing.B) {
			pool := &airlockv1.SandboxPool{}
			pool.Namespace, pool.Name = ns, "python-node"
			pool.Spec.TemplateRef.Name = "python-node"
			pool.Spec.Replicas = int32(par)
			if err := k8s.Create(ctx, pool); err != nil {
				eventually(b, 30*time.Second, "resizing pool", func() error {
					cur := &airlockv1.SandboxPool{}
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), cur); err != nil {
						return err
					}
					cur.Spec.Replicas = int32(par)
					return k8s.Update(ctx, cur)
				})
			}
			for b.Loop() {
				var warmCR, coldCR, warmGW, coldGW, floor []time.Duration
				var notWarm int
				// Every round starts with the pool full and the node settled (below), warm and cold alike.
				round := func(name string, f func() ([]time.Duration, int)) ([]time.Duration, int) {
					waitPoolReady(b, ns, "python-node", int32(par))
					settle(b)
					var d []time.Duration
					var n int
					before, err := apiWrites(ctx)
					if err != nil {
						b.Fatal(err)
					}
					busy, _ := benchstat.CPUBusyDuring(func() { d, n = f() })
					after, err := apiWrites(ctx)
					if err != nil {
						b.Fatal(err)
					}
					b.Logf("round: %s p50 %s max %s (%d not warm); node CPU busy %.0f%% during it; load %s; API writes until the last Ready: %s", name,
						benchstat.Percentile(d, 50), benchstat.Percentile(d, 100), n, 100*busy, benchstat.LoadAvg(), writesBetween(before, after))
					deleteAllAndWait(b, ns)
					return d, n
				}
				for range rounds {
					d, n := round("warm CR", func() ([]time.Duration, int) { return crRound(b, ns, par, true) })
					warmCR, notWarm = append(warmCR, d...), notWarm+n
					if cold {
						d, _ = round("cold CR", func() ([]time.Duration, int) { return crRound(b, ns, par, false) })
						coldCR = append(coldCR, d...)
					}
					d, n = round("warm gateway", func() ([]time.Duration, int) { return gatewayRound(b, g, key, ns, par, "python-node") })
					warmGW, notWarm = append(warmGW, d...), notWarm+n
					if cold {
						d, _ = round("cold gateway", func() ([]time.Duration, int) { return gatewayRound(b, g, key, ns, par, "python-node-cold") })
						coldGW = append(coldGW, d...)
					}
					d, _ = round("API floor", func() ([]time.Duration, int) { return floorRound(b, ns, par) })
					floor = append(floor, d...)
				}
				fl := benchstat.Percentile(floor, 50)
				b.ReportMetric(float64(fl.Milliseconds()), "floor-p50-ms")
				b.Logf("parallelism %d, API floor (a claim's three writes, no controller): p50 %s p90 %s (%s–%s, %d); warm gateway / floor %.2f, warm CR / floor %.2f at p50",
					par, fl, benchstat.Percentile(floor, 90), benchstat.Percentile(floor, 0), benchstat.Percentile(floor, 100), len(floor),
					benchstat.Percentile(warmGW, 50).Seconds()/fl.Seconds(), benchstat.Percentile(warmCR, 50).Seconds()/fl.Seconds())
				for _, s := range []struct {
					name       string
					warm, cold []time.Duration
				}{{"cr", warmCR, coldCR}, {"gateway", warmGW, coldGW}} {
					w := benchstat.Percentile(s.warm, 50)
					b.ReportMetric(float64(w.Milliseconds()), s.name+"-warm-p50-ms")
					b.ReportMetric(float64(benchstat.Percentile(s.warm, 90).Milliseconds()), s.name+"-warm-p90-ms")
					if len(s.cold) == 0 {
						b.Logf("parallelism %d, %s: warm p50 %s p90 %s (%s–%s, %d); no cold rounds (AIRLOCK_BENCH_COLD=0)", par, s.name, w,
							benchstat.Percentile(s.warm, 90), benchstat.Percentile(s.warm, 0), benchstat.Percentile(s.warm, 100), len(s.warm))
						continue
					}
					c := benchstat.Percentile(s.cold, 50)
					b.ReportMetric(float64(c.Milliseconds()), s.name+"-cold-p50-ms")
					b.ReportMetric(w.Seconds()/c.Seconds(), s.name+"-warm/cold")
					b.Logf("parallelism %d, %s: warm p50 %s p90 %s (%s–%s, %d); cold p50 %s p90 %s (%s–%s, %d); warm/cold %.3f",
						par, s.name, w, benchstat.Percentile(s.warm, 90), benchstat.Percentile(s.warm, 0), benchstat.Percentile(s.warm, 100), len(s.warm),
						c, benchstat.Percentile(s.cold, 90), benchstat.Percentile(s.cold, 0), benchstat.Percentile(s.cold, 100), len(s.cold), w.Seconds()/c.Seconds())
				}
				b.ReportMetric(float64(notWarm), "warm-misses")
				b.Logf("parallelism %d: %d of %d warm attempts were not warm", par, notWarm, len(warmCR)+len(warmGW))
			}
		})
	}
}

// settle waits until the node's CPU is quiet (under 35% busy over a second, the pool's idle members and the
// control plane using less), for up to 3 minutes: the previous round's 20 gVisor teardowns and the pool's refill
// otherwise run on into the next round's measurement, on both sides.
func settle(b *testing.B) {
	waited, busy, quiet := benchstat.WaitQuiet(0.35, 3*time.Minute)
	if !quiet {
		b.Logf("node not quiet after %s (CPU %.0f%% busy): measuring anyway", waited.Round(time.Second), 100*busy)
		return
	}
	b.Logf("node quiet (CPU %.0f%% busy) after %s", 100*busy, waited.Round(time.Second))
}

// benchParallelism is AIRLOCK_BENCH_PARALLEL (comma-separated), else 1 and 20. Each sandbox pod requests at
// least 100m CPU, so a node needs 2× the parallelism × 100m free: 20 members and 20 cold
// sandboxes do not fit on the 2-core local cluster's node.
func benchParallelism() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("AIRLOCK_BENCH_PARALLEL"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return []int{1, 20}
	}
	return out
}

// warmPhases are the marks a warm CR round records for each sandbox, from the moment its create was sent: the
// create answered, the finalizer seen on the watch (the manager's first pass), the claiming pass began (the
// member's claimed-at annotation, the manager's clock on this same machine) and Ready seen on the watch.
var warmPhases = []string{"created", "finalizer", "claim began", "ready"}

// watchSandboxes watches the Sandboxes of ns from now on.
func watchSandboxes(b *testing.B, ns string) watch.Interface {
	w, err := k8s.Watch(context.Background(), &airlockv1.SandboxList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// crRound creates n Sandboxes at once, with the pool or without it, and returns each one's creation-to-Ready
// time seen through a watch, and how many of the warm ones were not warm. A warm round also logs the p50 and
// max of each of warmPhases, to tell queueing from API writes in a burst.
func crRound(b *testing.B, ns string, n int, warm bool) ([]time.Duration, int) {
	ctx := context.Background()
	w := watchSandboxes(b, ns)
	defer w.Stop()
	var mu sync.Mutex
	started := map[string]time.Time{}
	marks := map[string][]time.Duration{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &airlockv1.Sandbox{}
			s.Namespace, s.Name = ns, fmt.Sprintf("bench-%d-%d", i, time.Now().UnixNano()%1e9)
			s.Spec.TemplateRef = &airlockv1.TemplateReference{Name: "python-node"}
			if warm {
				s.Spec.PoolRef = &airlockv1.PoolReference{Name: "python-node"}
			}
			t0 := time.Now()
			mu.Lock()
			started[s.Name] = t0
			mu.Unlock()
			if err := k8s.Create(ctx, s); err != nil {
				b.Error(err)
			}
			mu.Lock()
			marks["created"] = append(marks["created"], time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	var took []time.Duration
	misses := 0
	finalized, ready := map[string]bool{}, map[string]bool{}
	deadline := time.After(readyTimeout)
	for len(took) < n {
		select {
		case ev := <-w.ResultChan():
			s, ok := ev.Object.(*airlockv1.Sandbox)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			t0, mine := started[s.Name] // the creates are done: no lock needed
			if !mine {
				continue
			}
			if !finalized[s.Name] && len(s.Finalizers) > 0 {
				finalized[s.Name] = true
				marks["finalizer"] = append(marks["finalizer"], time.Since(t0))
			}
			if s.Status.Phase != airlockv1.PhaseReady || ready[s.Name] {
				continue
			}
			ready[s.Name] = true
			took = append(took, time.Since(t0))
			marks["ready"] = append(marks["ready"], time.Since(t0))
			if warm && (s.Status.Pool == nil || s.Status.Pool.Result != airlockv1.ClaimWarm) {
				misses++
			}
		case <-deadline:
			mu.Lock()
			var waiting []string
			for name := range started {
				cur, _ := getSandbox(ns, name)
				waiting = append(waiting, name+": "+describe(cur))
			}
			mu.Unlock()
			b.Fatalf("%d of %d sandboxes (warm %t) not Ready after %s:\n%s", n-len(took), n, warm, readyTimeout, strings.Join(waiting, "\n"))
		}
	}
	if warm {
		logWarmPhases(b, ns, started, marks)
	}
	return took, misses
}

// logWarmPhases adds each claimed member's claimed-at to marks and logs the p50 and max of every phase.
func logWarmPhases(b *testing.B, ns string, started map[string]time.Time, marks map[string][]time.Duration) {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil {
			continue
		}
		t0, ok := started[ref.Name] // a claimed member keeps its labels: its controller is the sandbox
		at, err := time.Parse(time.RFC3339Nano, p.Annotations[sandbox.AnnotationClaimedAt])
		if ok && err == nil {
			marks["claim began"] = append(marks["claim began"], at.Sub(t0))
		}
	}
	var line []string
	for _, k := range warmPhases {
		line = append(line, fmt.Sprintf("%s %s/%s", k, benchstat.Percentile(marks[k], 50), benchstat.Percentile(marks[k], 100)))
	}
	b.Logf("warm phases from create, p50/max: %s", strings.Join(line, ", "))
}

// gatewayRound sends n creates of template at once and returns each POST's time to its 201 with status ready,
// and how many were not warm (when template has a pool). It also logs, from each POST, when a watch of the
// namespace saw its Sandbox created and Ready: what the gateway adds is the rest.
func gatewayRound(b *testing.B, g *gatewayProc, key, ns string, n int, template string) ([]time.Duration, int) {
	w := watchSandboxes(b, ns)
	defer w.Stop()
	var seenMu sync.Mutex
	created, ready := map[string]time.Time{}, map[string]time.Time{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*airlockv1.Sandbox)
			if !ok {
				continue
			}
			now := time.Now()
			seenMu.Lock()
			if _, ok := created[s.Name]; !ok {
				created[s.Name] = now
			}
			if _, ok := ready[s.Name]; !ok && s.Status.Phase == airlockv1.PhaseReady {
				ready[s.Name] = now
			}
			seenMu.Unlock()
		}
	}()
	var mu sync.Mutex
	var took []time.Duration
	sent, answered := map[string]time.Time{}, map[string]time.Time{}
	misses := 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			code, body, err := g.try(key, "POST", "/v1/sandboxes", map[string]any{"template": template})
			d := time.Since(t0)
			if err != nil || code != http.StatusCreated || body["status"] != "ready" {
				b.Errorf("create %s: %d %v %v", template, code, body, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			took = append(took, d)
			if id, ok := body["id"].(string); ok {
				sent[id], answered[id] = t0, t0.Add(d)
			}
			if body["start"] != "warm" {
				misses++
			}
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // the watch's last events
	w.Stop()
	<-watched
	var seenCreated, seenReady, after []time.Duration
	for id, t0 := range sent {
		if at, ok := created[id]; ok {
			seenCreated = append(seenCreated, at.Sub(t0))
		}
		if at, ok := ready[id]; ok {
			seenReady = append(seenReady, at.Sub(t0))
			after = append(after, answered[id].Sub(at))
		}
	}
	b.Logf("gateway phases from POST, p50/max: created seen %s/%s, Ready seen %s/%s, 201 %s/%s; 201 after Ready seen %s/%s (%d of %d seen Ready)",
		benchstat.Percentile(seenCreated, 50), benchstat.Percentile(seenCreated, 100), benchstat.Percentile(seenReady, 50),
		benchstat.Percentile(seenReady, 100), benchstat.Percentile(took, 50), benchstat.Percentile(took, 100),
		benchstat.Percentile(after, 50), benchstat.Percentile(after, 100), len(seenReady), len(took))
	return took, misses
}

// floorLabel marks floorRound's ConfigMaps, which deleteAllAndWait removes.
const floorLabel = "bench.airlock.dev/floor"

// floorRound is what a burst of n claims costs in API writes alone, with no controller and no watch between
// them: n clients at once each make a warm claim's three writes in a row, as the client would if it did the
// manager's work itself. A ConfigMap of a Sandbox's size stands in for the Sandbox (its create, then its
// update for the status write); the claim's pod patch is a real one, under the optimistic lock, of an
// unclaimed member of the pool (an annotation, which the pool ignores; the kubelet syncs the pod, as it does
// for a claim). It returns each client's time for its three writes: the floor a warm claim cannot go below on
// this node.
func floorRound(b *testing.B, ns string, n int) ([]time.Duration, int) {
	ctx := context.Background()
	pods := members(b, ns, "python-node")
	if len(pods) < n {
		b.Fatalf("API floor: %d unclaimed members, want %d", len(pods), n)
	}
	var mu sync.Mutex
	var took []time.Duration
	conflicts := 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := &pods[i]
			cm := &corev1.ConfigMap{}
			cm.Namespace, cm.Name = ns, fmt.Sprintf("floor-%d-%d", i, time.Now().UnixNano()%1e9)
			cm.Labels = map[string]string{floorLabel: "true"}
			cm.Data = map[string]string{"spec": strings.Repeat("x", 1024)}
			t0 := time.Now()
			if err := k8s.Create(ctx, cm); err != nil {
				b.Error(err)
				return
			}
			patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
			metav1.SetMetaDataAnnotation(&pod.ObjectMeta, floorLabel, cm.Name)
			if err := k8s.Patch(ctx, pod, patch); apierrors.IsConflict(err) {
				// The member changed since the list (the kubelet's status): a claim would take another one.
				mu.Lock()
				conflicts++
				mu.Unlock()
				return
			} else if err != nil {
				b.Error(err)
				return
			}
			cm.Data["status"] = "Ready"
			if err := k8s.Update(ctx, cm); err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			took = append(took, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if conflicts > 0 {
		b.Logf("API floor: %d of %d members changed since they were listed: left out", conflicts, n)
	}
	return took, 0
}

func deleteAllAndWait(b *testing.B, ns string) {
	ctx := context.Background()
	if err := k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{floorLabel: "true"}); err != nil {
		b.Fatal(err)
	}
	if err := k8s.DeleteAllOf(ctx, &airlockv1.Sandbox{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	// Deleting 20 gVisor sandboxes at once kept the 2-core local node busy (load ~120) for minutes.
	eventually(b, 5*time.Minute, "round's sandboxes deleted", func() error {
		var l airlockv1.SandboxList
		if err := k8s.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d left", len(l.Items))
		}
		return nil
	})
}
