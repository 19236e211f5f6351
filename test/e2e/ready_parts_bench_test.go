package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/benchstat"
)

// coldParts are the steps from a bare pod to a Sandbox, each adding one thing to the step vs names; timed to the
// pod's Ready condition (the Sandbox's Ready through the manager), gVisor, the same image, resources and
// security context throughout. Airlock's pod and Sandbox run the image's own airlock-init (init: Image), each
// followed by the same with airlock-init from the init image's volume (init: Volume).
var coldParts = []struct {
	name   string
	policy bool                                                                          // a deny-all policy selecting the pod, made before it as the manager does
	pod    func(b *testing.B, ns, name string, t *airlockv1.SandboxTemplate) *corev1.Pod // nil: a Sandbox through the manager
	init   airlockv1.InitSource
	vs     int // the step this one adds to
}{
	{"bare pod", false, barePod, airlockv1.InitFromImage, 0},
	{"+ its deny-all policy, made first", true, func(b *testing.B, ns, name string, t *airlockv1.SandboxTemplate) *corev1.Pod {
		p := barePod(b, ns, name, t)
		p.Labels[sandbox.LabelName] = name
		return p
	}, airlockv1.InitFromImage, 0},
	{"+ airlock-init pid1 and its gate", true, func(b *testing.B, ns, name string, t *airlockv1.SandboxTemplate) *corev1.Pod {
		p := benchPod(b, ns, name, t)
		p.Spec.Containers[0].ReadinessProbe = nil
		return p
	}, airlockv1.InitFromImage, 1},
	{"+ the readiness probe (Airlock's pod, init: Image)", true, benchPod, airlockv1.InitFromImage, 2},
	{"Airlock's pod, init: Volume", true, benchPod, airlockv1.InitFromVolume, 3},
	{"Sandbox through the manager, init: Image", false, nil, airlockv1.InitFromImage, 3},
	{"Sandbox through the manager, init: Volume", false, nil, airlockv1.InitFromVolume, 5},
}

// BenchmarkColdReadyParts says where a cold Sandbox's time goes beyond a bare pod's: each round creates one pod
// of each step in coldParts, in turn (A, B, C, D, E, F, A, …; AIRLOCK_BENCH_ROUNDS, default 10 each), deletions
// awaited and the node's CPU settled before each. Run: make bench-e2e.
func BenchmarkColdReadyParts(b *testing.B) {
	rounds := envInt("AIRLOCK_BENCH_ROUNDS", 10)
	for b.Loop() {
		ns := benchNamespace(b)
		tmpls := map[airlockv1.InitSource]*airlockv1.SandboxTemplate{airlockv1.InitFromImage: benchTemplate(b, ns, "gvisor", airlockv1.InitFromImage),
			airlockv1.InitFromVolume: benchTemplate(b, ns, "gvisor", airlockv1.InitFromVolume)}
		took := make([][]time.Duration, len(coldParts))
		phases := make([]map[string][]time.Duration, len(coldParts))
		for i := range rounds {
			for j, part := range coldParts {
				name := fmt.Sprintf("part%d-%d", j, i)
				benchstat.WaitQuiet(0.25, time.Minute) // the last start's teardown must not be measured
				var d time.Duration
				var marks map[string]time.Duration
				if part.pod == nil {
					d, marks = sandboxReady(b, ns, name, tmpls[part.init])
				} else {
					d, marks = policyAndPodReady(b, ns, name, part.policy, part.pod(b, ns, name, tmpls[part.init]))
				}
				took[j] = append(took[j], d)
				if phases[j] == nil {
					phases[j] = map[string][]time.Duration{}
				}
				for k, v := range marks {
					phases[j][k] = append(phases[j][k], v)
				}
			}
		}
		var lines []string
		base := benchstat.Percentile(took[0], 50)
		for j, part := range coldParts {
			p50, p90 := benchstat.Percentile(took[j], 50), benchstat.Percentile(took[j], 90)
			step := ""
			if j > 0 {
				step = fmt.Sprintf(", %+dms over %q", (p50 - benchstat.Percentile(took[part.vs], 50)).Milliseconds(), coldParts[part.vs].name)
			}
			lines = append(lines, fmt.Sprintf("%s: p50 %s p90 %s (min %s max %s; %.2fx the bare pod%s); p50 from the first create: %s", part.name, p50, p90,
				benchstat.Percentile(took[j], 0), benchstat.Percentile(took[j], 100), p50.Seconds()/base.Seconds(), step, phaseMedians(phases[j])))
			b.ReportMetric(p50.Seconds(), strings.ReplaceAll(fmt.Sprintf("part%d-p50-s", j), " ", ""))
		}
		b.Logf("gVisor, %d rounds each, to Ready:\n  %s\n  load %s", rounds, strings.Join(lines, "\n  "), benchstat.LoadAvg())
	}
}

// policyAndPodReady creates the pod's deny-all policy (with policy; gVisor's sandbox shape), then the pod, and
// returns how long from the first create until the pod is Ready, and when (from that create) each of the pod's
// phases was seen; then it deletes them and waits until they are gone.
func policyAndPodReady(b *testing.B, ns, name string, policy bool, pod *corev1.Pod) (time.Duration, map[string]time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	np := sandbox.BuildNetworkPolicy(&airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone}, nil)
	w, err := k8s.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if policy {
		if err := k8s.Create(ctx, np); err != nil {
			b.Fatal(err)
		}
	}
	if err := k8s.Create(ctx, pod); err != nil {
		b.Fatal(err)
	}
	var took time.Duration
	marks := map[string]time.Duration{}
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || p.Name != name {
			continue
		}
		for _, m := range podPhases(p) {
			if _, ok := marks[m]; !ok {
				marks[m] = time.Since(start)
			}
		}
		if podReady(p) {
			took = marks["pod ready"]
			break
		}
	}
	if took == 0 {
		b.Fatalf("pod %s not Ready after %s", name, readyTimeout)
	}
	awaitGone(b, pod)
	if policy {
		awaitGone(b, np)
	}
	return took, marks
}

// phaseMedians says the p50 of each phase in marks, in the order they happen.
func phaseMedians(marks map[string][]time.Duration) string {
	var out []string
	for _, k := range sandboxPhases {
		if v := marks[k]; len(v) > 0 {
			out = append(out, fmt.Sprintf("%s %s", k, benchstat.Percentile(v, 50)))
		}
	}
	return strings.Join(out, ", ")
}
