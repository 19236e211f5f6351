package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// BenchmarkColdReady measures, one at a time, creation to Ready of a Sandbox (policy, pod, network gate,
// status) against creation to Running of a bare pod with the same image, runtime and security context, in the
// same run, for gVisor and runc. It reports the medians and their ratio. Run: make bench-e2e.
func BenchmarkColdReady(b *testing.B) {
	const rounds = 5
	for _, rc := range []string{"gvisor", "runc"} {
		b.Run(rc, func(b *testing.B) {
			if rc == "runc" {
				restartManager(b, "--allow-unisolated-runtimes") // runc is refused by default
			}
			for b.Loop() {
				ns := benchNamespace(b)
				var pods, sandboxes []time.Duration
				for i := range rounds {
					pods = append(pods, barePodRunning(b, ns, fmt.Sprintf("bare-%d", i), rc))
					sandboxes = append(sandboxes, sandboxReady(b, ns, fmt.Sprintf("sbx-%d", i), rc))
				}
				p, s := median(pods), median(sandboxes)
				b.ReportMetric(p.Seconds(), "pod-running-s")
				b.ReportMetric(s.Seconds(), "sandbox-ready-s")
				b.ReportMetric(s.Seconds()/p.Seconds(), "ratio")
				b.Logf("%s: bare pod to Running median %s %v; Sandbox to Ready median %s %v; ratio %.2f",
					rc, p.Round(time.Millisecond), pods, s.Round(time.Millisecond), sandboxes, s.Seconds()/p.Seconds())
			}
		})
	}
}

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

func barePodRunning(b *testing.B, ns, name, rc string) time.Duration {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		RuntimeClassName: ptr.To(rc), AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false),
		RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To(int64(1)),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "sandbox", Image: sandboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sleep", "infinity"},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}}
	start := time.Now()
	if err := k8s.Create(ctx, pod); err != nil {
		b.Fatal(err)
	}
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err == nil && pod.Status.Phase == corev1.PodRunning {
			took := time.Since(start)
			_ = k8s.Delete(ctx, pod, client.GracePeriodSeconds(0))
			return took
		}
		if time.Since(start) > readyTimeout {
			b.Fatalf("pod %s not running after %s", name, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sandboxReady(b *testing.B, ns, name, rc string) time.Duration {
	ctx := context.Background()
	s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxSpec{Image: sandboxImage, RuntimeClassName: ptr.To(rc)}}
	start := time.Now()
	if err := k8s.Create(ctx, s); err != nil {
		b.Fatal(err)
	}
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(s), s); err == nil && s.Status.Phase == airlockv1.PhaseReady {
			took := time.Since(start)
			_ = k8s.Delete(ctx, s)
			return took
		}
		if time.Since(start) > readyTimeout {
			b.Fatalf("sandbox %s not Ready after %s: %s", name, readyTimeout, describe(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
