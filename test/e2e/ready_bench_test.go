package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/controller"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// BenchmarkColdReady compares a cold Sandbox, from create to Ready, with a bare pod of the same image, runtime,
// resources, env, annotations and security context (the Sandbox's own pod spec, without Airlock's tools volume
// and readiness probe and with `sleep` as its command), from create to the pod's Ready condition: for gVisor
// with airlock-init from the image itself (init: Image, the chart's default template) and from the init image's
// volume (init: Volume, for images that lack it), and for runc (init: Image).
// Rounds alternate (pod, Sandbox, pod, …; AIRLOCK_BENCH_ROUNDS, default 20 each) and each round's objects are
// deleted, and their deletion awaited (a pod's gracefully: until the kubelet has torn it down), before the next;
// each start waits for the node's CPU to settle first.
// Each phase is timed as a watch sees it: the Sandbox's policy and pod appear, the pod is scheduled, the
// sandbox container runs, the pod is Ready (PID 1's gate passed: the readiness probe), the Sandbox is Ready.
// Run: make bench-e2e.
func BenchmarkColdReady(b *testing.B) {
	rounds := envInt("AIRLOCK_BENCH_ROUNDS", 20)
	for _, c := range []struct {
		rc   string
		init airlockv1.InitSource
	}{{"gvisor", airlockv1.InitFromImage}, {"gvisor", airlockv1.InitFromVolume}, {"runc", airlockv1.InitFromImage}} {
		b.Run(c.rc+"-init-"+strings.ToLower(string(c.init)), func(b *testing.B) {
			if c.rc == "runc" {
				restartManager(b, "--allow-unisolated-runtimes") // runc is refused by default
			}
			for b.Loop() {
				ns := benchNamespace(b)
				tmpl := benchTemplate(b, ns, c.rc, c.init)
				var pods, sandboxes []time.Duration
				phases, barePhases := map[string][]time.Duration{}, map[string][]time.Duration{}
				notQuiet := 0
				// Each start is on a settled node: the last one's teardown must not be measured.
				settle := func() {
					if _, _, quiet := benchstat.WaitQuiet(0.25, time.Minute); !quiet {
						notQuiet++
					}
				}
				for i := range rounds {
					settle()
					name := fmt.Sprintf("bare-%d", i)
					took, marks := policyAndPodReady(b, ns, name, false, barePod(b, ns, name, tmpl))
					pods = append(pods, took)
					for k, v := range marks {
						barePhases[k] = append(barePhases[k], v)
					}
					settle()
					took, marks = sandboxReady(b, ns, fmt.Sprintf("sbx-%d", i), tmpl)
					sandboxes = append(sandboxes, took)
					for k, v := range marks {
						phases[k] = append(phases[k], v)
					}
				}
				p50, s50 := benchstat.Percentile(pods, 50), benchstat.Percentile(sandboxes, 50)
				p90, s90 := benchstat.Percentile(pods, 90), benchstat.Percentile(sandboxes, 90)
				b.ReportMetric(p50.Seconds(), "pod-ready-p50-s")
				b.ReportMetric(s50.Seconds(), "sandbox-ready-p50-s")
				b.ReportMetric(s50.Seconds()/p50.Seconds(), "ratio-p50")
				b.ReportMetric(s90.Seconds()/p90.Seconds(), "ratio-p90")
				var marks []string
				for _, k := range sandboxPhases {
					if v := phases[k]; len(v) > 0 {
						marks = append(marks, fmt.Sprintf("%s p50 %s p90 %s", k, benchstat.Percentile(v, 50), benchstat.Percentile(v, 90)))
					}
				}
				b.Logf("%s bare pod, p50 from its create: %s", c.rc, phaseMedians(barePhases))
				b.Logf("%s, init %s, %d rounds each: bare pod to Ready p50 %s p90 %s (min %s max %s); Sandbox to Ready p50 %s p90 %s (min %s max %s); ratio p50 %.2f p90 %.2f; load %s",
					c.rc, c.init, rounds, p50, p90, benchstat.Percentile(pods, 0), benchstat.Percentile(pods, 100), s50, s90, benchstat.Percentile(sandboxes, 0), benchstat.Percentile(sandboxes, 100),
					s50.Seconds()/p50.Seconds(), s90.Seconds()/p90.Seconds(), benchstat.LoadAvg())
				b.Logf("%s Sandbox, from its create: %s", c.rc, strings.Join(marks, "; "))
				b.Logf("%d of %d starts were on a node not below 25%% CPU busy after a minute's wait; the manager re-triggered the readiness probe of %d of %d Sandboxes",
					notQuiet, 2*rounds, len(phases[probeNudged]), rounds)
			}
		})
	}
}

// sandboxPhases are the marks sandboxReady (and, for its pod, policyAndPodReady) records, in the order they
// happen.
var sandboxPhases = []string{"policy", "pod", "scheduled", "pod IP", "container running", "pod ready", "sandbox ready"}

func benchNamespace(b *testing.B) string {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = k8s.DeleteAllOf(ctx, &airlockv1.Sandbox{}, client.InNamespace(ns.Name))
		_ = k8s.Delete(ctx, ns)
	})
	return ns.Name
}

// benchTemplate creates the template both sides of a cold-start comparison are built from: the sandbox image
// under the runtime class rc, with airlock-init from init.
func benchTemplate(b *testing.B, ns, rc string, init airlockv1.InitSource) *airlockv1.SandboxTemplate {
	t := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-" + rc + "-" + strings.ToLower(string(init))},
		Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: rc, Init: init}}
	if err := k8s.Create(context.Background(), t); err != nil {
		b.Fatal(err)
	}
	return t
}

// benchSandbox is the Sandbox both sides are built from.
func benchSandbox(ns, name string, tmpl *airlockv1.SandboxTemplate) *airlockv1.Sandbox {
	return &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: tmpl.Name}}}
}

// benchPod is the pod the manager makes for benchSandbox (under gVisor: the isolation PID 1 proves), made
// directly, with none of Airlock's labels (the manager ignores it).
func benchPod(b *testing.B, ns, name string, tmpl *airlockv1.SandboxTemplate) *corev1.Pod {
	s := benchSandbox(ns, name, tmpl)
	r, err := sandbox.Resolve(s, tmpl, sandbox.DefaultDefaults())
	if err != nil {
		b.Fatal(err)
	}
	r.RuntimeHandler = map[string]string{"gvisor": "runsc", "runc": "runc"}[tmpl.Spec.RuntimeClassName] // as the manager resolves it
	o := sandbox.DefaultPodOptions(initImage)
	o.Isolation = map[string]airlockv1.Isolation{"gvisor": airlockv1.IsolationGVisor, "runc": airlockv1.IsolationNone}[tmpl.Spec.RuntimeClassName]
	pod := sandbox.BuildPod(s, r, o)
	pod.Labels["airlock-bench"] = "pod"
	delete(pod.Labels, sandbox.LabelManagedBy) // its sandbox.airlock.dev/name stays: the bench's policy selects it
	return pod
}

// barePod is the pod the manager would make for the Sandbox, minus what only Airlock needs: no tools (image)
// volume, `sleep` as PID 1 instead of airlock-init and its gate, no readiness probe, and none of Airlock's
// labels.
func barePod(b *testing.B, ns, name string, tmpl *airlockv1.SandboxTemplate) *corev1.Pod {
	pod := benchPod(b, ns, name, tmpl)
	pod.Labels = map[string]string{"airlock-bench": "bare"}
	c := &pod.Spec.Containers[0]
	c.Command, c.ReadinessProbe = []string{"sleep", "infinity"}, nil
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == sandbox.ToolsDir })
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name })
	})
	return pod
}

// sandboxReady creates the Sandbox, returns how long until it is Ready and when (from its create) each phase
// was seen, then deletes it and waits until it and its pod are gone.
func sandboxReady(b *testing.B, ns, name string, tmpl *airlockv1.SandboxTemplate) (time.Duration, map[string]time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	s := benchSandbox(ns, name, tmpl)
	type seen struct {
		mark string
		at   time.Time
	}
	marks := make(chan seen, 64)
	watchInto := func(list client.ObjectList, f func(watch.Event) []string) {
		w, err := k8s.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				for _, m := range f(ev) {
					select {
					case marks <- seen{m, time.Now()}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	watchInto(&corev1.PodList{}, func(ev watch.Event) []string {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Name == name {
			return podPhases(p)
		}
		return nil
	})
	watchInto(&metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicyList"}},
		func(ev watch.Event) []string {
			if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ok && m.Name == name {
				return []string{"policy"}
			}
			return nil
		})
	watchInto(&airlockv1.SandboxList{}, func(ev watch.Event) []string {
		if x, ok := ev.Object.(*airlockv1.Sandbox); ok && x.Name == name && x.Status.Phase == airlockv1.PhaseReady {
			return []string{"sandbox ready"}
		}
		return nil
	})
	start := time.Now()
	if err := k8s.Create(ctx, s); err != nil {
		b.Fatal(err)
	}
	at := map[string]time.Duration{}
	for at["sandbox ready"] == 0 {
		select {
		case m := <-marks:
			if _, ok := at[m.mark]; !ok {
				at[m.mark] = m.at.Sub(start)
			}
		case <-ctx.Done():
			cur, _ := getSandbox(ns, name)
			b.Fatalf("sandbox %s not Ready after %s (seen %v): %s", name, readyTimeout, at, describe(cur))
		}
	}
	cancel()
	awaitGone(b, s)
	awaitGone(b, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	return at["sandbox ready"], at
}

// podPhases are the phases p shows, of sandboxPhases.
func podPhases(p *corev1.Pod) []string {
	out := []string{"pod"}
	if p.Spec.NodeName != "" {
		out = append(out, "scheduled")
	}
	if p.Status.PodIP != "" {
		out = append(out, "pod IP")
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil {
			out = append(out, "container running")
		}
	}
	if podReady(p) {
		out = append(out, "pod ready")
	}
	if p.Annotations[controller.AnnotationProbeNudged] != "" {
		out = append(out, probeNudged)
	}
	return out
}

// probeNudged marks a pod whose readiness probe the manager re-triggered (the kubelet skipped its first).
const probeNudged = "probe re-triggered"

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// awaitGone deletes o and waits until it is gone. A pod is deleted with its own grace period, never forced: a
// forced delete removes the object at once and leaves the kubelet to stop the pod's containers and gVisor
// sandbox and remove its network afterwards, during the next round's start. A pod deleted gracefully is gone
// only once the kubelet has torn it down, as the manager deletes a Sandbox's pod.
func awaitGone(b *testing.B, o client.Object) {
	ctx := context.Background()
	if err := k8s.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	eventually(b, readyTimeout, o.GetName()+" gone", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return err
	})
}
