package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// A RuntimeClass whose handler is not isolating (runc) is refused before any pod exists, with a reason naming
// the class, the handler and the flag; removing the handler check in Defaults.CheckRuntime makes it fail.
func TestIntegrationUnisolatedHandlerIsRefused(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeSandbox(ns, "plain").image("busybox").runtime("runc").obj())).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "plain")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonRuntimeNotIsolating))
		msg := meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady).Message
		g.Expect(msg).To(And(ContainSubstring(`RuntimeClass "runc"`), ContainSubstring(`handler "runc"`),
			ContainSubstring("--isolating-handlers=runsc,runsc-*,gvisor,kata*"), ContainSubstring("--allow-unisolated-runtimes")))
	}).WithTimeout(waitLong).Should(Succeed())
	g.Expect(c.Get(ctx, key(ns, "plain"), &corev1.Pod{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
}

// Allowed by the operator, a runc sandbox runs and says so: isolation none, from the node's own kernel.
func TestIntegrationUnisolatedAllowedSaysNone(t *testing.T) {
	_, c := startEnv(t)
	d := sandbox.DefaultDefaults()
	d.AllowUnisolated = true
	startManager(t, managerOptions{defaults: &d})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeSandbox(ns, "plain").image("busybox").runtime("runc").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "plain")
	g.Expect(pod.Spec.Containers[0].Command).To(ContainElements("--gate-port=10250", "--expect-isolation=none"), "the kubelet port from the Node's status")
	markPodRunning(t, c, pod, 0)
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "plain")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationNone))
		g.Expect(s.Status.RuntimeHandler).To(Equal("runc"))
		g.Expect(s.Status.IsolationEvidence).To(Equal(&airlockv1.IsolationEvidence{Proven: airlockv1.IsolationNone, PodKernel: "4.4.0", NodeKernel: envNodeKernel,
			GateTarget: "10.123.0.1:10250", Gate: "refused"}))
	}).WithTimeout(waitLong).Should(Succeed())
}

// The gateway talks only to the key PID 1 attested, and the gate counts only for the target PID 1 attests it
// probed: a Ready sandbox records the key; one whose PID 1 probed its own loopback (what a tenant's
// AIRLOCK_NODE_IP=127.0.0.1 did before the env was reserved: the pod's flags look right) never becomes Ready or
// gets a key. Fails with the attested target unchecked in buildEvidence (checked once).
func TestIntegrationAttestationIsChecked(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{attest: func(pod *corev1.Pod, st *attestation.Statement) {
		if pod.Labels[sandbox.LabelName] == "fooled" {
			st.GateTarget = "127.0.0.1:10250"
		}
	}})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	for _, name := range []string{"honest", "fooled"} {
		g.Expect(c.Create(ctx, makeSandbox(ns, name).image("busybox").obj())).To(Succeed())
		pod, _ := getPodAndPolicy(t, c, ns, name)
		markPodRunning(t, c, pod, 0)
	}
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "honest")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.SupervisorKey).To(Equal(testKey))
		g.Expect(s.Status.IsolationEvidence.Gate).To(Equal("refused"))
	}).WithTimeout(waitLong).Should(Succeed())
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "fooled")
		g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("False/" + ReasonGateUnproven))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionNetworkIsolated).Message).To(
			ContainSubstring("PID 1's gate probed 127.0.0.1:10250"))
		g.Expect(condition(s, airlockv1.ConditionReady)).To(HavePrefix("False/"))
		g.Expect(s.Status.SupervisorKey).To(BeEmpty())
	}).WithTimeout(waitLong).Should(Succeed())
}

// A kata-handler class is isolating: accepted, and proven by a kernel that none of the nodes runs, which PID 1
// is told to check.
func TestIntegrationKataHandlerIsIsolating(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeSandbox(ns, "vm").image("busybox").runtime("kata").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "vm")
	g.Expect(pod.Spec.Containers[0].Command).To(ContainElements("--expect-isolation=vm", "--host-kernel="+envNodeKernel))
	markPodRunning(t, c, pod, 0)
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "vm")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationKata))
	}).WithTimeout(waitLong).Should(Succeed())
}

// The runtime is judged by what the pod proved: a runsc sandbox whose PID 1 found no gVisor marker fails with
// RuntimeMismatch, and a gate that probed a port its node's kubelet does not listen on proves nothing.
func TestIntegrationRuntimeEvidenceIsChecked(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)

	g.Expect(c.Create(ctx, makeSandbox(ns, "gv").image("busybox").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "gv")
	markPodRunning(t, c, pod, 0)
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "gv")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationGVisor))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionNetworkIsolated).Message).To(ContainSubstring("10.123.0.1:10250"))
	}).WithTimeout(waitLong).Should(Succeed())

	g.Expect(c.Create(ctx, makeSandbox(ns, "host").image("busybox").obj())).To(Succeed())
	pod, _ = getPodAndPolicy(t, c, ns, "host")
	g.Expect(pod.Spec.Containers[0].Command).To(ContainElement("--expect-isolation=gvisor"))
	markPodOn(t, c, pod, envNode, 1, sandbox.RuntimeMismatchPrefix+"the RuntimeClass should give gVisor isolation, but ...")
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "host")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonRuntimeMismatch))
		g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("False/" + ReasonRuntimeMismatch))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
		g.Expect(s.Status.Isolation).To(BeEmpty())
	}).WithTimeout(waitLong).Should(Succeed())

	// An image's own airlock-init of another release ends PID 1 before its gate: the sandbox fails and says so.
	g.Expect(c.Create(ctx, makeSandbox(ns, "old-init").image("busybox").obj())).To(Succeed())
	pod, _ = getPodAndPolicy(t, c, ns, "old-init")
	markPodOn(t, c, pod, envNode, 1, sandbox.InitMismatchPrefix+"the manager speaks init protocol 2, but this airlock-init ...")
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "old-init")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonInitMismatch))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
	}).WithTimeout(waitLong).Should(Succeed())

	// A node whose kubelet listens elsewhere than the port the pod's gate probed.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}
	g.Expect(c.Create(ctx, other)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), other) })
	other.Status.NodeInfo.KernelVersion = envNodeKernel
	other.Status.DaemonEndpoints.KubeletEndpoint.Port = 10255
	g.Expect(c.Status().Update(ctx, other)).To(Succeed())

	g.Expect(c.Create(ctx, makeSandbox(ns, "elsewhere").image("busybox").obj())).To(Succeed())
	pod, _ = getPodAndPolicy(t, c, ns, "elsewhere")
	g.Expect(pod.Spec.Containers[0].Command).To(ContainElement("--gate-port=10250"))
	markPodOn(t, c, pod, other.Name, 0, "")
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "elsewhere")
		g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("False/" + ReasonGateUnproven))
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonNotIsolated))
		g.Expect(s.Status.Isolation).To(BeEmpty())
	}).WithTimeout(waitLong).Should(Succeed())
}

// GKE Sandbox's handler (gvisor) is isolating by default and its runsc has no marker file: its pod proves gVisor
// by the kernel log; where nothing proves it, status says unverified and the sandbox is refused unless the
// operator allows it; on its node's own kernel it is a mismatch, allowed or not. Fails with the unverified
// judgement of runtimeBlocker removed (unverifiedBlocker): checked.
func TestIntegrationUnverifiedIsolation(t *testing.T) {
	_, c := startEnv(t)
	attest := func(pod *corev1.Pod, st *attestation.Statement) {
		switch pod.Labels[sandbox.LabelName] {
		case "kernel-log":
			st.GVisorMarker, st.Method = false, string(airlockv1.MethodKernelLog)
		case "unproven", "unproven-allowed":
			attestUnverified(st, "4.4.0")
		case "on-host":
			attestUnverified(st, envNodeKernel)
		}
	}
	stop := startManager(t, managerOptions{attest: attest})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	run := func(name string) {
		g.Expect(c.Create(ctx, makeSandbox(ns, name).image("busybox").runtime("gke-gvisor").obj())).To(Succeed())
		pod, _ := getPodAndPolicy(t, c, ns, name)
		g.Expect(pod.Spec.Containers[0].Command).To(ContainElement("--expect-isolation=gvisor"))
		markPodRunning(t, c, pod, 0)
	}
	for _, name := range []string{"kernel-log", "unproven", "on-host"} {
		run(name)
	}
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "kernel-log")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationGVisor))
		g.Expect(s.Status.IsolationEvidence.Method).To(Equal(airlockv1.MethodKernelLog))
		g.Expect(s.Status.RuntimeHandler).To(Equal("gvisor"))

		s = getSandbox(t, c, ns, "unproven")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonIsolationUnverified))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationUnverified))
		g.Expect(s.Status.IsolationEvidence.Unverified).To(ContainSubstring("syslog(2)"))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady).Message).To(
			And(ContainSubstring("--allow-unverified-isolation"), ContainSubstring("gvisor-marker-file")))

		s = getSandbox(t, c, ns, "on-host")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonRuntimeMismatch))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
	}).WithTimeout(waitLong).Should(Succeed())

	stop()
	allowing := sandbox.DefaultDefaults()
	allowing.AllowUnverified = true
	startManager(t, managerOptions{attest: attest, defaults: &allowing})
	run("unproven-allowed")
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "unproven-allowed")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(s.Status.Isolation).To(Equal(airlockv1.IsolationUnverified))
		g.Expect(s.Status.IsolationEvidence.PodKernel).To(Equal("4.4.0"))
		g.Expect(condition(getSandbox(t, c, ns, "on-host"), airlockv1.ConditionReady)).To(Equal("False/" + ReasonRuntimeMismatch))
	}).WithTimeout(waitLong).Should(Succeed())
}
