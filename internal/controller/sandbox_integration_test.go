package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

const waitLong = 20 * time.Second

func key(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// getPodAndPolicy waits until the sandbox's pod and policy exist and returns them.
func getPodAndPolicy(t *testing.T, c client.Client, ns, name string) (*corev1.Pod, *networkingv1.NetworkPolicy) {
	t.Helper()
	g := NewWithT(t)
	pod, np := &corev1.Pod{}, &networkingv1.NetworkPolicy{}
	g.Eventually(func() error { return c.Get(context.Background(), key(ns, name), pod) }).WithTimeout(waitLong).Should(Succeed())
	g.Eventually(func() error { return c.Get(context.Background(), key(ns, name), np) }).WithTimeout(waitLong).Should(Succeed())
	return pod, np
}

// createReady creates s, waits for its pod and policy, plays the kubelet's part (the pod runs, the gate passed)
// and waits until the sandbox is Ready.
func createReady(t *testing.T, c client.Client, s *airlockv1.Sandbox) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	g.Expect(c.Create(context.Background(), s)).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, s.Namespace, s.Name)
	markPodRunning(t, c, pod, 0)
	g.Eventually(func() airlockv1.SandboxPhase { return getSandbox(t, c, s.Namespace, s.Name).Status.Phase }).
		WithTimeout(waitLong).Should(Equal(airlockv1.PhaseReady))
	return pod
}

// markPodRunning plays the kubelet's part (envtest runs none) on envNode: with gateExit 0 the sandbox container
// runs and its readiness probe (PID 1's gate) passed; otherwise PID 1 failed its gate: the container ended with
// that exit code and a message in its termination log, and the pod failed.
func markPodRunning(t *testing.T, c client.Client, pod *corev1.Pod, gateExit int32) {
	t.Helper()
	msg := ""
	if gateExit != 0 {
		msg = "gate said so"
	}
	markPodOn(t, c, pod, envNode, gateExit, msg)
}

// markPodOn binds the pod to node (the scheduler's part) and sets its status as markPodRunning does, with msg as
// the termination message of a failed gate.
func markPodOn(t *testing.T, c client.Client, pod *corev1.Pod, node string, gateExit int32, msg string) {
	t.Helper()
	ctx := context.Background()
	bindPod(t, c, pod, node)
	now := metav1.Now()
	status := corev1.ContainerStatus{Name: sandbox.ContainerName, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	phase := corev1.PodRunning
	if gateExit != 0 {
		phase = corev1.PodFailed
		status = corev1.ContainerStatus{Name: sandbox.ContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: gateExit, Reason: "Error", Message: msg}}}
	}
	pod.Status = corev1.PodStatus{Phase: phase, PodIP: "10.244.0.9", HostIP: "10.123.0.1", ContainerStatuses: []corev1.ContainerStatus{status}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("updating pod status: %v", err)
	}
}

// bindPod binds the pod to node, unless it is bound already (the scheduler's part), and rereads it.
func bindPod(t *testing.T, c client.Client, pod *corev1.Pod, node string) {
	t.Helper()
	if pod.Spec.NodeName != "" {
		return
	}
	ctx := context.Background()
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := c.SubResource("binding").Create(ctx, pod, binding); err != nil {
		t.Fatalf("binding pod: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatalf("getting bound pod: %v", err)
	}
	finishDeletion(t, c, pod)
}

// finishDeletion plays the kubelet's other part: the API server removes a bound pod only once its kubelet
// confirms the containers stopped, so a deleted pod is force-removed here.
func finishDeletion(t *testing.T, c client.Client, pod *corev1.Pod) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k, uid := client.ObjectKeyFromObject(pod), pod.UID
	go func() {
		for ctx.Err() == nil {
			p := &corev1.Pod{}
			err := c.Get(ctx, k, p)
			if apierrors.IsNotFound(err) || (err == nil && p.UID != uid) {
				return
			}
			if err == nil && p.DeletionTimestamp != nil {
				_ = c.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func getSandbox(t *testing.T, c client.Client, ns, name string) *airlockv1.Sandbox {
	t.Helper()
	s := &airlockv1.Sandbox{}
	if err := c.Get(context.Background(), key(ns, name), s); err != nil {
		t.Fatalf("getting sandbox: %v", err)
	}
	return s
}

// condition returns "Status/Reason" of a condition, for compact assertions.
func condition(s *airlockv1.Sandbox, t string) string {
	c := meta.FindStatusCondition(s.Status.Conditions, t)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

func TestIntegrationCreateMakesIsolatedPodAndPolicy(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeTemplate(ns, "py", "localhost/airlock/sandbox-python:1").obj())).To(Succeed())
	g.Expect(c.Create(ctx, makeSandbox(ns, "s1").template("py").labels(map[string]string{"team": "a"}).obj())).To(Succeed())

	pod, np := getPodAndPolicy(t, c, ns, "s1")
	sbx := getSandbox(t, c, ns, "s1")

	// The policy must exist before the pod: etcd revisions order their creation.
	npRV, _ := strconv.ParseInt(np.ResourceVersion, 10, 64)
	podRV, _ := strconv.ParseInt(pod.ResourceVersion, 10, 64)
	g.Expect(npRV).To(BeNumerically("<", podRV), "NetworkPolicy must be created before the pod")

	for _, o := range []metav1.Object{pod, np} {
		g.Expect(metav1.IsControlledBy(o, sbx)).To(BeTrue(), "%T must be controlled by the sandbox", o)
		g.Expect(o.GetLabels()).To(HaveKeyWithValue(sandbox.LabelName, "s1"))
	}
	g.Expect(sbx.Finalizers).To(ContainElement(Finalizer))

	// Pod shape: isolating runtime, restricted PSS, no token, long-lived PID 1, limits, never restarted.
	spec := pod.Spec
	g.Expect(spec.RuntimeClassName).To(Equal(ptr.To("gvisor")))
	g.Expect(spec.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
	g.Expect(spec.EnableServiceLinks).To(Equal(ptr.To(false)))
	g.Expect(spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
	g.Expect(spec.HostNetwork || spec.HostPID || spec.HostIPC).To(BeFalse())
	g.Expect(*spec.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(*spec.SecurityContext.RunAsUser).To(Equal(int64(1000)))
	g.Expect(spec.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	main := spec.Containers[0]
	g.Expect(main.Image).To(Equal("localhost/airlock/sandbox-python:1"))
	g.Expect(main.Command[:2]).To(Equal([]string{sandbox.InitBinary, "pid1"}))
	g.Expect(main.Command).To(ContainElements("--expect-isolation=gvisor", "--gate-port=10250"))
	// One container start: airlock-init comes from an image volume, where the cluster offers them (not at the
	// floor, make test-compat: there it is copied in).
	g.Expect(copiesInit(g, pod)).To(Equal(!envOffersImageVolumes()), "API server %s", envServerVersion)
	g.Expect(main.ReadinessProbe.HTTPGet.Port.IntValue()).To(Equal(sandbox.ReadyPort))
	g.Expect(main.Command).To(ContainElement(fmt.Sprintf("--ready-port=%d", sandbox.ReadyPort)))
	g.Expect(*main.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(main.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		g.Expect(main.Resources.Limits).To(HaveKey(r))
		g.Expect(main.Resources.Requests).To(HaveKey(r))
	}
	g.Expect(pod.Labels).To(HaveKeyWithValue("team", "a"))

	// Policy: selects only this pod, denies everything both ways.
	g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{sandbox.LabelName: "s1"}))
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
	g.Expect(np.Spec.Ingress).To(BeEmpty())
	g.Expect(np.Spec.Egress).To(BeEmpty())

	// Until the pod runs and its gate passed, the sandbox is Pending and not isolated.
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "s1")
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhasePending))
		g.Expect(s.Status.PodName).To(Equal("s1"))
		g.Expect(s.Status.RuntimeClassName).To(Equal("gvisor"))
		g.Expect(s.Status.ExpiresAt).NotTo(BeNil())
		g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("False/" + ReasonGatePending))
	}).WithTimeout(waitLong).Should(Succeed())

	markPodRunning(t, c, pod, 0)
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "s1")
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseReady))
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("True/" + ReasonReady))
		g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("True/" + ReasonIsolated))
		g.Expect(s.Status.PodIP).To(Equal("10.244.0.9"))
		g.Expect(s.Status.StartedAt).NotTo(BeNil())
		for _, cond := range s.Status.Conditions {
			g.Expect(cond.ObservedGeneration).To(Equal(s.Generation))
		}
	}).WithTimeout(waitLong).Should(Succeed())

	// Policies are additive: another policy that selects the pod makes it not isolated, and not Ready, whether
	// it selects by the sandbox's own name label (indexed under the name) or by any other label (indexed as
	// any); one that requires another sandbox's name does not count.
	allowEgress := func(name string, sel map[string]string) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: sel},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
			},
		}
	}
	elsewhere := allowEgress("allow-s2", map[string]string{sandbox.LabelName: "s2"})
	g.Expect(c.Create(ctx, elsewhere)).To(Succeed())
	for _, other := range []*networkingv1.NetworkPolicy{
		allowEgress("allow-team-a", map[string]string{"team": "a"}),
		allowEgress("allow-by-name", map[string]string{sandbox.LabelName: "s1"}),
	} {
		g.Expect(c.Create(ctx, other)).To(Succeed())
		g.Eventually(func(g Gomega) {
			s := getSandbox(t, c, ns, "s1")
			g.Expect(condition(s, airlockv1.ConditionNetworkIsolated)).To(Equal("False/" + ReasonOtherPolicySelects))
			msg := meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionNetworkIsolated).Message
			g.Expect(msg).To(ContainSubstring(other.Name))
			g.Expect(msg).NotTo(ContainSubstring(elsewhere.Name))
			g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonNotIsolated))
		}).WithTimeout(waitLong).Should(Succeed())
		g.Expect(c.Delete(ctx, other)).To(Succeed())
		g.Eventually(func() string { return condition(getSandbox(t, c, ns, "s1"), airlockv1.ConditionReady) }).
			WithTimeout(waitLong).Should(Equal("True/" + ReasonReady))
	}
	g.Expect(c.Delete(ctx, elsewhere)).To(Succeed())

	// Someone edits our policy to allow egress: it is restored.
	np = &networkingv1.NetworkPolicy{}
	g.Expect(c.Get(ctx, key(ns, "s1"), np)).To(Succeed())
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	g.Expect(c.Update(ctx, np)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, key(ns, "s1"), np)).To(Succeed())
		g.Expect(np.Spec.Egress).To(BeEmpty())
	}).WithTimeout(waitLong).Should(Succeed())
}

func TestIntegrationGateFailureFailsSandbox(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	g := NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(context.Background(), makeSandbox(ns, "s").image("busybox").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "s")
	markPodRunning(t, c, pod, 1)
	g.Eventually(func() string {
		return condition(getSandbox(t, c, ns, "s"), airlockv1.ConditionNetworkIsolated)
	}).WithTimeout(waitLong).Should(Equal("False/" + ReasonGateFailed))
	s := getSandbox(t, c, ns, "s")
	g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonGateFailed))
	g.Expect(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady).Message).To(ContainSubstring("gate said so"))
	g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
}

func TestIntegrationMissingTemplateAndRuntimeClass(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)

	g.Expect(c.Create(ctx, makeSandbox(ns, "later").template("not-yet").obj())).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "later")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonTemplateNotFound))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhasePending))
		g.Expect(s.Status.ExpiresAt).NotTo(BeNil(), "a blocked sandbox still expires")
	}).WithTimeout(waitLong).Should(Succeed())
	g.Expect(c.Get(ctx, key(ns, "later"), &corev1.Pod{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))

	// Creating the template unblocks it through the template watch.
	g.Expect(c.Create(ctx, makeTemplate(ns, "not-yet", "img:1").obj())).To(Succeed())
	getPodAndPolicy(t, c, ns, "later")

	g.Expect(c.Create(ctx, makeSandbox(ns, "norc").image("img:1").runtime("firecracker").obj())).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "norc")
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonRuntimeNotFound))
		g.Expect(meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady).Message).To(ContainSubstring(`"firecracker"`))
	}).WithTimeout(waitLong).Should(Succeed())
	g.Expect(c.Get(ctx, key(ns, "norc"), &networkingv1.NetworkPolicy{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
}

func TestIntegrationDeletionCleansUp(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	createReady(t, c, makeSandbox(ns, "gone").image("img:1").obj())

	g.Expect(c.Delete(ctx, getSandbox(t, c, ns, "gone"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, key(ns, "gone"), &airlockv1.Sandbox{}))
	}).WithTimeout(waitLong).Should(BeTrue())
	g.Expect(c.Get(ctx, key(ns, "gone"), &corev1.Pod{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
	g.Expect(c.Get(ctx, key(ns, "gone"), &networkingv1.NetworkPolicy{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
}

func TestIntegrationLostPodFailsSandboxWithoutReplacement(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	pod := createReady(t, c, makeSandbox(ns, "lost").image("img:1").obj())
	uid := pod.UID

	g.Expect(c.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "lost")
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonPodLost))
	}).WithTimeout(waitLong).Should(Succeed())
	g.Consistently(func() bool {
		p := &corev1.Pod{}
		err := c.Get(ctx, key(ns, "lost"), p)
		return apierrors.IsNotFound(err) || p.UID == uid
	}).WithTimeout(2*time.Second).Should(BeTrue(), "a lost pod must not be replaced by an empty one")
	g.Eventually(func() []string { return eventReasons(t, c, ns, "lost") }).WithTimeout(waitLong).Should(ContainElement("Failed"))
}

// An evicted pod fails the sandbox with the kubelet's own reason, not an empty "the pod stopped: ".
func TestIntegrationEvictedPodFailsSandboxWithItsReason(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	pod := createReady(t, c, makeSandbox(ns, "ev").image("img:1").obj())

	// What the kubelet writes when it evicts the pod. The killed container's own status says only how it ended,
	// which is what the Sandbox said before the pod's reason came first.
	g.Expect(c.Get(ctx, key(ns, "ev"), pod)).To(Succeed())
	evicted := `Usage of EmptyDir volume "workdir" exceeds the limit "1Gi". `
	pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", evicted
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: evicted})
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
	g.Expect(c.Status().Update(ctx, pod)).To(Succeed())

	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "ev")
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseFailed))
		g.Expect(condition(s, airlockv1.ConditionReady)).To(Equal("False/" + ReasonPodFailed))
		g.Expect(readyMessage(&s.Status)).To(Equal(ReasonPodFailed + `: the sandbox's pod stopped: Evicted: Usage of EmptyDir volume "workdir" exceeds the limit "1Gi".`))
	}).WithTimeout(waitLong).Should(Succeed())
}

func TestIntegrationRestartKeepsExpiry(t *testing.T) {
	_, c := startEnv(t)
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)

	stopFirst := startManager(t, managerOptions{})
	g.Expect(c.Create(ctx, makeSandbox(ns, "kept").image("img:1").obj())).To(Succeed())
	getPodAndPolicy(t, c, ns, "kept")
	var expires metav1.Time
	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, ns, "kept")
		g.Expect(s.Status.ExpiresAt).NotTo(BeNil())
		expires = *s.Status.ExpiresAt
	}).WithTimeout(waitLong).Should(Succeed())
	g.Expect(expires.Sub(getSandbox(t, c, ns, "kept").CreationTimestamp.Time)).To(Equal(30 * time.Minute))
	stopFirst()

	// A restarted manager with a different default timeout keeps the stored absolute expiry.
	d := sandbox.DefaultDefaults()
	d.Timeout = 5 * time.Minute
	startManager(t, managerOptions{defaults: &d})
	g.Expect(c.Create(ctx, makeSandbox(ns, "probe").image("img:1").obj())).To(Succeed())
	g.Eventually(func() *metav1.Time { return getSandbox(t, c, ns, "probe").Status.ExpiresAt }).WithTimeout(waitLong).ShouldNot(BeNil())
	g.Expect(getSandbox(t, c, ns, "kept").Status.ExpiresAt.Time).To(BeTemporally("==", expires.Time))
}

func TestIntegrationTimeoutExtensionIsCapped(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeTemplate(ns, "capped", "img:1").maxTimeout(time.Hour).obj())).To(Succeed())
	g.Expect(c.Create(ctx, makeSandbox(ns, "ext").template("capped").timeout(10*time.Minute).obj())).To(Succeed())
	getPodAndPolicy(t, c, ns, "ext")
	created := getSandbox(t, c, ns, "ext").CreationTimestamp.Time
	expiry := func() time.Duration {
		s := getSandbox(t, c, ns, "ext")
		if s.Status.ExpiresAt == nil {
			return 0
		}
		return s.Status.ExpiresAt.Sub(created)
	}
	g.Eventually(expiry).WithTimeout(waitLong).Should(Equal(10 * time.Minute))

	setTimeout := func(d time.Duration) error {
		s := getSandbox(t, c, ns, "ext")
		s.Spec.Timeout = &metav1.Duration{Duration: d}
		return c.Update(ctx, s)
	}
	g.Expect(setTimeout(20 * time.Minute)).To(Succeed())
	g.Eventually(expiry).WithTimeout(waitLong).Should(Equal(20 * time.Minute))
	// Beyond the template's maxTimeout: accepted by the API (the cap is the template's), clamped to 1h.
	g.Expect(setTimeout(3 * time.Hour)).To(Succeed())
	g.Eventually(expiry).WithTimeout(waitLong).Should(Equal(time.Hour))
	// Lowering is rejected by the API server.
	err := setTimeout(time.Minute)
	g.Expect(err).To(MatchError(ContainSubstring("spec.timeout may only grow")))
}

func TestIntegrationTemplateChangeDoesNotMutateRunningSandbox(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeTemplate(ns, "tpl", "img:1").maxTimeout(time.Hour).obj())).To(Succeed())
	g.Expect(c.Create(ctx, makeSandbox(ns, "stable").template("tpl").obj())).To(Succeed())
	pod, np := getPodAndPolicy(t, c, ns, "stable")
	g.Eventually(func() string { return getSandbox(t, c, ns, "stable").Status.Image }).WithTimeout(waitLong).Should(Equal("img:1"))

	tpl := &airlockv1.SandboxTemplate{}
	g.Expect(c.Get(ctx, key(ns, "tpl"), tpl)).To(Succeed())
	tpl.Spec.Image = "img:2"
	tpl.Spec.RuntimeClassName = "runc"
	tpl.Spec.MaxTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	tpl.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted,
		Egress: []airlockv1.EgressRule{{CIDR: "203.0.113.0/24"}}}
	g.Expect(c.Update(ctx, tpl)).To(Succeed())

	// Raising the timeout past the old template cap must still be capped by the snapshot (1h).
	s := getSandbox(t, c, ns, "stable")
	s.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Hour}
	g.Expect(c.Update(ctx, s)).To(Succeed())
	g.Eventually(func() time.Duration {
		s := getSandbox(t, c, ns, "stable")
		return s.Status.ExpiresAt.Sub(s.CreationTimestamp.Time)
	}).WithTimeout(waitLong).Should(Equal(time.Hour))

	g.Consistently(func(g Gomega) {
		p, n := &corev1.Pod{}, &networkingv1.NetworkPolicy{}
		g.Expect(c.Get(ctx, key(ns, "stable"), p)).To(Succeed())
		g.Expect(c.Get(ctx, key(ns, "stable"), n)).To(Succeed())
		g.Expect(p.UID).To(Equal(pod.UID))
		g.Expect(p.Spec.Containers[0].Image).To(Equal("img:1"))
		g.Expect(n.Spec.Egress).To(BeEmpty())
		g.Expect(n.ResourceVersion).To(Equal(np.ResourceVersion))
		st := getSandbox(t, c, ns, "stable").Status
		g.Expect(st.Image).To(Equal("img:1"))
		g.Expect(st.RuntimeClassName).To(Equal("gvisor"))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

func TestIntegrationRestrictedNetworkPolicy(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	g.Expect(c.Create(ctx, makeSandbox(ns, "r").image("img:1").network(airlockv1.NetworkSpec{
		Mode:   airlockv1.NetworkRestricted,
		Egress: []airlockv1.EgressRule{{CIDR: "203.0.113.10/32", Ports: []airlockv1.EgressPort{{Port: 443}}}},
	}).obj())).To(Succeed())
	_, np := getPodAndPolicy(t, c, ns, "r")
	g.Expect(np.Spec.Ingress).To(BeEmpty())
	g.Expect(np.Spec.Egress).To(HaveLen(1), "the listed CIDR only: no DNS")
	g.Expect(np.Spec.Egress[0].To[0].IPBlock.CIDR).To(Equal("203.0.113.10/32"))
	g.Expect(np.Spec.Egress[0].Ports[0].Port.IntVal).To(Equal(int32(443)))
	g.Expect(*np.Spec.Egress[0].Ports[0].Protocol).To(Equal(corev1.ProtocolTCP))
}

func TestIntegrationAPIValidation(t *testing.T) {
	_, c := startEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, c)
	long := strings.Repeat("a", 64)
	cases := map[string]struct {
		sbx  *airlockv1.Sandbox
		want string
	}{
		"neither image nor template": {makeSandbox(ns, "a").obj(), "exactly one of spec.templateRef or spec.image"},
		"both image and template":    {makeSandbox(ns, "a").image("x").template("t").obj(), "exactly one of spec.templateRef or spec.image"},
		"zero timeout":               {makeSandbox(ns, "a").image("x").timeout(0).obj(), "spec.timeout must be greater than 0s"},
		"timeout over the cap":       {makeSandbox(ns, "a").image("x").timeout(25 * time.Hour).obj(), "at most 24h"},
		"unknown size":               {makeSandbox(ns, "a").image("x").size("huge").obj(), "spec.size"},
		"egress in mode None": {makeSandbox(ns, "a").image("x").network(airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone,
			Egress: []airlockv1.EgressRule{{CIDR: "10.0.0.0/8"}}}).obj(), "network.egress may only be set when network.mode is Restricted"},
		"bad CIDR": {makeSandbox(ns, "a").image("x").network(airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted,
			Egress: []airlockv1.EgressRule{{CIDR: "example.com"}}}).obj(), "cidr must be a CIDR"},
		"reserved label": {makeSandbox(ns, "a").image("x").labels(map[string]string{"sandbox.airlock.dev/name": "x"}).obj(), "reserved prefix"},
		"name too long":  {makeSandbox(ns, long).image("x").obj(), "metadata.name must be at most 63 characters"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, tc.sbx)
			if err == nil {
				t.Fatalf("created an invalid sandbox; want an error containing %q", tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an Invalid error containing %q", err, tc.want)
			}
		})
	}

	// Immutable fields name themselves; the timeout may grow.
	g := NewWithT(t)
	s := makeSandbox(ns, "immutable").image("x").timeout(time.Hour).runtime("gvisor").
		network(airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone}).obj()
	g.Expect(c.Create(ctx, s)).To(Succeed())
	mutations := map[string]func(*airlockv1.Sandbox){
		"spec.image is immutable":            func(s *airlockv1.Sandbox) { s.Spec.Image = "y" },
		"spec.network is immutable":          func(s *airlockv1.Sandbox) { s.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted} },
		"spec.runtimeClassName is immutable": func(s *airlockv1.Sandbox) { s.Spec.RuntimeClassName = ptr.To("runc") },
		"only spec.timeout may be added":     func(s *airlockv1.Sandbox) { s.Spec.Size = airlockv1.SizeLarge },
		"spec.timeout may only grow":         func(s *airlockv1.Sandbox) { s.Spec.Timeout = &metav1.Duration{Duration: time.Minute} },
		"exactly one of spec.templateRef or": func(s *airlockv1.Sandbox) { s.Spec.TemplateRef = &airlockv1.TemplateReference{Name: "t"} },
	}
	for want, mutate := range mutations {
		fresh := getSandbox(t, c, ns, "immutable")
		mutate(fresh)
		err := c.Update(ctx, fresh)
		g.Expect(err).To(HaveOccurred(), want)
		g.Expect(err.Error()).To(ContainSubstring(want))
	}
	fresh := getSandbox(t, c, ns, "immutable")
	fresh.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Hour}
	g.Expect(c.Update(ctx, fresh)).To(Succeed())

	tpl := makeTemplate(ns, "bad", "img").defaultTimeout(2 * time.Hour).maxTimeout(time.Hour).obj()
	g.Expect(c.Create(ctx, tpl)).To(MatchError(ContainSubstring("defaultTimeout must not exceed maxTimeout")))
}

// eventReasons lists the reasons of events about a sandbox.
func eventReasons(t *testing.T, c client.Client, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "Sandbox" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
