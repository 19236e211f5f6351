package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// TestIntegrationProbeNudge: a starting sandbox whose container runs but whose readiness probe has not passed
// after probeNudgeAfter gets its pod annotated, once, which makes the kubelet sync the pod and probe again; a
// sandbox whose probe passes at once gets no annotation.
func TestIntegrationProbeNudge(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeTemplate(ns, "py", "localhost/airlock/sandbox-python:1").obj())).To(Succeed())

	// The kubelet's skipped first probe: the container runs, not ready.
	g.Expect(c.Create(ctx, makeSandbox(ns, "missed").template("py").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "missed")
	nudged := startWithSkippedProbe(t, c, pod)
	g.Expect(getSandbox(t, c, ns, "missed").Status.Phase).NotTo(Equal(airlockv1.PhaseReady))

	// The probe that the nudge brought passes: Ready, and the pod is not annotated again.
	pod.Status.ContainerStatuses[0].Ready = true
	g.Expect(c.Status().Update(ctx, pod)).To(Succeed())
	g.Eventually(func() airlockv1.SandboxPhase { return getSandbox(t, c, ns, "missed").Status.Phase }).
		WithTimeout(waitLong).Should(Equal(airlockv1.PhaseReady))
	g.Consistently(func() string {
		g.Expect(c.Get(ctx, key(ns, "missed"), pod)).To(Succeed())
		return pod.Annotations[AnnotationProbeNudged]
	}).WithTimeout(2 * probeNudgeAfter).Should(Equal(nudged))

	// A later readiness failure is not a start: no nudge.
	pod.Status.ContainerStatuses[0].Ready = false
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	g.Expect(c.Status().Update(ctx, pod)).To(Succeed())
	g.Consistently(func() string {
		g.Expect(c.Get(ctx, key(ns, "missed"), pod)).To(Succeed())
		return pod.Annotations[AnnotationProbeNudged]
	}).WithTimeout(3 * probeNudgeAfter).Should(Equal(nudged))

	// A probe that passes at once needs no nudge.
	quick := createReady(t, c, makeSandbox(ns, "quick").template("py").obj())
	g.Consistently(func() map[string]string {
		g.Expect(c.Get(ctx, key(ns, "quick"), quick)).To(Succeed())
		return quick.Annotations
	}).WithTimeout(3 * probeNudgeAfter).ShouldNot(HaveKey(AnnotationProbeNudged))
}

// TestIntegrationPoolProbeNudge: a starting pool member whose probe was skipped is annotated once, and is
// claimable once its probe passes.
func TestIntegrationPoolProbeNudge(t *testing.T) {
	h := newPoolHarness(t, makePool("", "warm", "py", 1))
	g := NewWithT(t)
	var pods []corev1.Pod
	g.Eventually(func() int { pods = h.members(); return len(pods) }).WithTimeout(waitLong).Should(Equal(1))
	pod := &pods[0]
	nudged := startWithSkippedProbe(t, h.c, pod)
	g.Expect(h.getPool().Status.ReadyMembers).To(BeZero())

	pod.Status.ContainerStatuses[0].Ready = true
	g.Expect(h.c.Status().Update(context.Background(), pod)).To(Succeed())
	g.Eventually(func() int32 { return h.getPool().Status.ReadyMembers }).WithTimeout(waitLong).Should(Equal(int32(1)))
	g.Consistently(func() string {
		g.Expect(h.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		return pod.Annotations[AnnotationProbeNudged]
	}).WithTimeout(2 * probeNudgeAfter).Should(Equal(nudged))
}

// startWithSkippedProbe plays the kubelet that skipped the first probe: the pod is bound and its container
// runs, not ready. It waits until the pod is annotated, checks that this was no sooner than probeNudgeAfter,
// and returns the annotation.
func startWithSkippedProbe(t *testing.T, c client.Client, pod *corev1.Pod) string {
	t.Helper()
	ctx, g := context.Background(), NewWithT(t)
	bindPod(t, c, pod, envNode)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", HostIP: "10.123.0.1",
		ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	g.Expect(c.Status().Update(ctx, pod)).To(Succeed())
	running := time.Now()
	var nudged string
	g.Eventually(func() string {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		nudged = pod.Annotations[AnnotationProbeNudged]
		return nudged
	}).WithTimeout(waitLong).WithPolling(20 * time.Millisecond).ShouldNot(BeEmpty())
	g.Expect(time.Since(running)).To(BeNumerically(">=", probeNudgeAfter), "nudged before the probe had its chance")
	return nudged
}
