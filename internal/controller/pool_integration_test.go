package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/metrics"
	"airlock.dev/airlock/internal/sandbox"
)

// startPoolManager runs the Sandbox reconciler with its pool claimer and the pool reconciler, as cmd/manager
// wires them.
func startPoolManager(t *testing.T) {
	t.Helper()
	cfg, _ := startEnv(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: CacheOptions(), Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.NewController(reg, mgr.GetCache())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	pm, err := metrics.NewPool(reg)
	if err != nil {
		t.Fatalf("pool metrics: %v", err)
	}
	defaults, pod := sandbox.DefaultDefaults(), testPodOptions()
	att := &Attestations{Logs: attestingLogs{c: mgr.GetAPIReader()}}
	r := &SandboxReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
		Recorder: mgr.GetEventRecorder("airlock-manager"), Clock: clock.RealClock{}, Defaults: defaults, Pod: pod,
		Metrics: m, Workers: 8, Attestations: att,
		Pools: &PoolClaimer{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Defaults: defaults, Pod: pod, Metrics: pm,
			Attestations: att}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatalf("setting up sandbox controller: %v", err)
	}
	p := &PoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
		Recorder: mgr.GetEventRecorder("airlock-manager"), Clock: clock.RealClock{}, Defaults: defaults, Pod: pod, Attestations: att}
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatalf("setting up pool controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop within 30s")
		}
	})
}

func makePool(ns, name, tmpl string, replicas int32) *airlockv1.SandboxPool {
	return &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: airlockv1.SandboxPoolSpec{TemplateRef: airlockv1.TemplateReference{Name: tmpl}, Replicas: replicas}}
}

// poolHarness is one namespace with a template, a pool and both controllers.
type poolHarness struct {
	t    *testing.T
	c    client.Client
	ns   string
	pool string
}

func newPoolHarness(t *testing.T, pool *airlockv1.SandboxPool) *poolHarness {
	t.Helper()
	_, c := startEnv(t)
	startPoolManager(t)
	ns := newNamespace(t, c)
	g := NewWithT(t)
	g.Expect(c.Create(context.Background(), makeTemplate(ns, "py", "localhost/airlock/sandbox-python:test").obj())).To(Succeed())
	pool.Namespace = ns
	g.Expect(c.Create(context.Background(), pool)).To(Succeed())
	return &poolHarness{t: t, c: c, ns: ns, pool: pool.Name}
}

// members returns the pool's unclaimed member pods that are not being deleted.
func (h *poolHarness) members() []corev1.Pod {
	var pods corev1.PodList
	if err := h.c.List(context.Background(), &pods, client.InNamespace(h.ns), client.MatchingLabels{sandbox.LabelPool: h.pool}); err != nil {
		h.t.Fatalf("listing members: %v", err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		// A claimed pod keeps the pool's label; the pool's members are the pods it controls.
		if ref := metav1.GetControllerOf(&p); p.DeletionTimestamp == nil && ref != nil && ref.Kind == "SandboxPool" {
			out = append(out, p)
		}
	}
	return out
}

// readyMembers waits for n members, plays the kubelet for those not yet running, and waits until the pool
// reports them ready.
func (h *poolHarness) readyMembers(n int) []corev1.Pod {
	h.t.Helper()
	g := NewWithT(h.t)
	var pods []corev1.Pod
	// Plays the kubelet in waves: the pool starts at most maxStarting members at once, the next ones as these run.
	g.Eventually(func() int32 {
		pods = h.members()
		for i := range pods {
			if pods[i].Status.Phase != corev1.PodRunning {
				markPodRunning(h.t, h.c, &pods[i], 0)
			}
		}
		return h.getPool().Status.ReadyMembers
	}).WithTimeout(waitLong).Should(BeNumerically(">=", int32(n)))
	return pods
}

func (h *poolHarness) getPool() *airlockv1.SandboxPool {
	p := &airlockv1.SandboxPool{}
	if err := h.c.Get(context.Background(), key(h.ns, h.pool), p); err != nil {
		h.t.Fatalf("getting pool: %v", err)
	}
	return p
}

func (h *poolHarness) claim(name string) *airlockv1.Sandbox {
	s := makeSandbox(h.ns, name).template("py").obj()
	s.Spec.PoolRef = &airlockv1.PoolReference{Name: h.pool}
	return s
}

func TestIntegrationPoolKeepsReadyIsolatedMembers(t *testing.T) {
	h := newPoolHarness(t, makePool("", "warm", "py", 3))
	g := NewWithT(t)
	pods := h.readyMembers(3)
	tmpl := &airlockv1.SandboxTemplate{}
	g.Expect(h.c.Get(context.Background(), key(h.ns, "py"), tmpl)).To(Succeed())
	for _, pod := range pods {
		g.Expect(metav1.GetControllerOf(&pod).Kind).To(Equal("SandboxPool"))
		g.Expect(pod.Annotations[sandbox.AnnotationTemplateGeneration]).To(Equal(fmt.Sprint(tmpl.Generation)))
		np := &networkingv1.NetworkPolicy{}
		g.Expect(h.c.Get(context.Background(), key(h.ns, pod.Name), np)).To(Succeed(), "every member has its own policy")
		g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{sandbox.LabelPod: pod.Name}))
		g.Expect(np.Spec.Egress).To(BeEmpty())
	}
	var sandboxes airlockv1.SandboxList
	g.Expect(h.c.List(context.Background(), &sandboxes, client.InNamespace(h.ns))).To(Succeed())
	g.Expect(sandboxes.Items).To(BeEmpty(), "members are bare pods: count/sandboxes counts only claims")
	p := h.getPool()
	g.Expect(p.Status.Desired).To(Equal(int32(3)))
	g.Expect(p.Status.TemplateGeneration).To(Equal(tmpl.Generation))
	g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, airlockv1.PoolConditionReady)).To(BeTrue())
	g.Expect(meta.IsStatusConditionFalse(p.Status.Conditions, airlockv1.PoolConditionDrained)).To(BeTrue())
	for _, c := range p.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(Equal(p.Generation))
	}
	g.Consistently(func() int { return len(h.members()) }).WithTimeout(2*time.Second).Should(Equal(3), "never more members than replicas")
}

func TestIntegrationPoolClaimAdoptsMemberWithoutNewPodOrPolicy(t *testing.T) {
	h := newPoolHarness(t, makePool("", "warm", "py", 2))
	g := NewWithT(t)
	ctx := context.Background()
	before := map[string]bool{}
	policyVersions := map[string]string{}
	for _, p := range h.readyMembers(2) {
		before[p.Name] = true
		np := &networkingv1.NetworkPolicy{}
		g.Expect(h.c.Get(ctx, key(h.ns, p.Name), np)).To(Succeed())
		g.Expect(np.OwnerReferences).To(ContainElement(HaveField("UID", p.UID)), "a ready member's policy has its pod among its owners")
		policyVersions[p.Name] = np.ResourceVersion
	}
	s := h.claim("task-1")
	s.Spec.Env = []airlockv1.EnvVar{{Name: "TASK", Value: "42"}}
	s.Spec.Labels = map[string]string{"conversation": "c1"}
	g.Expect(h.c.Create(ctx, s)).To(Succeed())
	g.Eventually(func() airlockv1.SandboxPhase { return getSandbox(t, h.c, h.ns, "task-1").Status.Phase }).WithTimeout(waitLong).Should(Equal(airlockv1.PhaseReady))

	got := getSandbox(t, h.c, h.ns, "task-1")
	g.Expect(before).To(HaveKey(got.Status.PodName), "the sandbox runs in a member that was ready before it was created")
	g.Expect(got.Status.Pool).NotTo(BeNil())
	g.Expect(got.Status.Pool.Result).To(Equal(airlockv1.ClaimWarm))
	g.Expect(got.Status.StartedAt.Time).To(BeTemporally("~", got.Status.Pool.ClaimedAt.Time, time.Millisecond), "usage starts at the claim")
	g.Expect(got.Status.ExpiresAt.Time).To(BeTemporally("~", got.CreationTimestamp.Add(30*time.Minute), time.Second))
	g.Expect(condition(got, airlockv1.ConditionNetworkIsolated)).To(Equal("True/" + ReasonIsolated))
	g.Expect(apierrors.IsNotFound(h.c.Get(ctx, key(h.ns, "task-1"), &corev1.Pod{}))).To(BeTrue(), "no new pod")
	g.Expect(apierrors.IsNotFound(h.c.Get(ctx, key(h.ns, "task-1"), &networkingv1.NetworkPolicy{}))).To(BeTrue(), "no new policy")

	pod := &corev1.Pod{}
	g.Expect(h.c.Get(ctx, key(h.ns, got.Status.PodName), pod)).To(Succeed())
	g.Expect(metav1.IsControlledBy(pod, got)).To(BeTrue())
	// The claim relabels nothing but the sandbox's own labels, and leaves the member's policy unwritten.
	g.Expect(pod.Labels).To(HaveKeyWithValue(sandbox.LabelName, pod.Name))
	g.Expect(pod.Labels).To(HaveKeyWithValue(sandbox.LabelPool, "warm"))
	g.Expect(pod.Labels).To(HaveKeyWithValue("conversation", "c1"))
	g.Expect(pod.Annotations).To(HaveKeyWithValue(sandbox.AnnotationClaimedBy, string(got.UID)))
	for _, e := range pod.Spec.Containers[0].Env {
		g.Expect(e.Name).NotTo(Equal("TASK"), "per-claim env is bound late, through the exec path")
	}
	np := &networkingv1.NetworkPolicy{}
	g.Consistently(func() string {
		g.Expect(h.c.Get(ctx, key(h.ns, pod.Name), np)).To(Succeed())
		return np.ResourceVersion
	}).WithTimeout(2*time.Second).Should(Equal(policyVersions[pod.Name]), "the member's policy is not written by the claim")

	// Its rules are still the sandbox's to keep: changed by someone, they are restored (and it stays the pod's).
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	g.Expect(h.c.Update(ctx, np)).To(Succeed())
	g.Eventually(func() int {
		g.Expect(h.c.Get(ctx, key(h.ns, pod.Name), np)).To(Succeed())
		return len(np.Spec.Egress)
	}).WithTimeout(waitLong).Should(BeZero(), "the sandbox's reconciler restores the claimed member's policy")
	g.Expect(np.OwnerReferences).To(ContainElement(HaveField("UID", pod.UID)))
	g.Expect(np.Labels).To(HaveKeyWithValue(sandbox.LabelPool, "warm"))

	// The pool refills the claimed member.
	g.Eventually(func() int { return len(h.members()) }).WithTimeout(waitLong).Should(Equal(2))

	// Deleting the sandbox removes the claimed pod, then its policy (envtest has no garbage collector: the
	// sandbox's finalizer does it).
	g.Expect(h.c.Delete(ctx, got)).To(Succeed())
	finishDeletion(t, h.c, pod)
	g.Eventually(func() bool { return apierrors.IsNotFound(h.c.Get(ctx, key(h.ns, "task-1"), &airlockv1.Sandbox{})) }).WithTimeout(waitLong).Should(BeTrue())
	g.Expect(apierrors.IsNotFound(h.c.Get(ctx, key(h.ns, pod.Name), &networkingv1.NetworkPolicy{}))).To(BeTrue())
}

// TestIntegrationPoolRacingClaims: 50 sandboxes race for the 20 members of a pool. Exactly 20 get a member,
// each a different one; the other 30 are created cold or wait, as the pool's whenDrained says.
func TestIntegrationPoolRacingClaims(t *testing.T) {
	for _, when := range []airlockv1.DrainedPolicy{airlockv1.DrainedCold, airlockv1.DrainedWait} {
		t.Run(string(when), func(t *testing.T) {
			pool := makePool("", "race", "py", 20)
			pool.Spec.WhenDrained = when
			h := newPoolHarness(t, pool)
			g := NewWithT(t)
			h.readyMembers(20)
			// Refills stay unready for the test: envtest has no kubelet, and this test plays it only above.
			var wg sync.WaitGroup
			errs := make(chan error, 50)
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- h.c.Create(context.Background(), h.claim(fmt.Sprintf("race-%02d", i)))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				g.Expect(err).NotTo(HaveOccurred())
			}
			settled := func() (warm, other []airlockv1.Sandbox) {
				var list airlockv1.SandboxList
				g.Expect(h.c.List(context.Background(), &list, client.InNamespace(h.ns))).To(Succeed())
				for _, s := range list.Items {
					switch {
					case s.Status.Pool != nil && s.Status.Pool.Result == airlockv1.ClaimWarm && s.Status.Phase == airlockv1.PhaseReady:
						warm = append(warm, s)
					case when == airlockv1.DrainedCold && s.Status.Pool != nil && s.Status.Pool.Result == airlockv1.ClaimCold && s.Status.PodName == s.Name:
						other = append(other, s)
					case when == airlockv1.DrainedWait && s.Status.Pool == nil && condition(&s, airlockv1.ConditionReady) == "False/"+ReasonWaitingForMember:
						other = append(other, s)
					}
				}
				return warm, other
			}
			g.Eventually(func() int { w, o := settled(); return len(w) + len(o) }).WithTimeout(waitLong).Should(Equal(50))
			warm, _ := settled()
			g.Expect(warm).To(HaveLen(20))
			pods := map[string]string{}
			for _, s := range warm {
				g.Expect(pods).NotTo(HaveKey(s.Status.PodName), "member %s claimed twice", s.Status.PodName)
				pods[s.Status.PodName] = s.Name
				pod := &corev1.Pod{}
				g.Expect(h.c.Get(context.Background(), key(h.ns, s.Status.PodName), pod)).To(Succeed())
				g.Expect(metav1.IsControlledBy(pod, &s)).To(BeTrue())
				g.Expect(pod.Annotations[sandbox.AnnotationClaimedBy]).To(Equal(string(s.UID)))
			}
			// Nothing changes after the dust settles: no late second claim, and the refill stops at replicas.
			g.Consistently(func() int { w, _ := settled(); return len(w) }).WithTimeout(2 * time.Second).Should(Equal(20))
			g.Expect(len(h.members())).To(BeNumerically("<=", 20))
		})
	}
}

func TestIntegrationPoolTemplateChangeReplacesUnclaimedMembers(t *testing.T) {
	pool := makePool("", "roll", "py", 2)
	pool.Spec.MinReadyDuringRollout = 2
	h := newPoolHarness(t, pool)
	g := NewWithT(t)
	ctx := context.Background()
	old := h.readyMembers(2)

	tmpl := &airlockv1.SandboxTemplate{}
	g.Expect(h.c.Get(ctx, key(h.ns, "py"), tmpl)).To(Succeed())
	tmpl.Spec.Image = "localhost/airlock/sandbox-python:test2"
	g.Expect(h.c.Update(ctx, tmpl)).To(Succeed())

	// New members start; the old ones stay while they hold the floor but are never claimed.
	g.Eventually(func() int64 { return h.getPool().Status.TemplateGeneration }).WithTimeout(waitLong).Should(Equal(tmpl.Generation))
	g.Eventually(func() int32 { return h.getPool().Status.StaleMembers }).WithTimeout(waitLong).Should(Equal(int32(2)))
	g.Expect(h.getPool().Status.ReadyMembers).To(Equal(int32(0)))
	g.Expect(h.c.Create(ctx, h.claim("during-rollout"))).To(Succeed())
	g.Eventually(func() *airlockv1.PoolClaimStatus { return getSandbox(t, h.c, h.ns, "during-rollout").Status.Pool }).
		WithTimeout(waitLong).Should(HaveField("Result", airlockv1.ClaimCold))
	for _, p := range old {
		g.Expect(h.c.Get(ctx, key(h.ns, p.Name), &corev1.Pod{})).To(Succeed(), "the floor keeps %s until its replacement is ready", p.Name)
	}

	// Once the new generation is ready, the old members go.
	var fresh []corev1.Pod
	g.Eventually(func() int {
		fresh = nil
		for _, p := range h.members() {
			if p.Spec.Containers[0].Image == tmpl.Spec.Image {
				fresh = append(fresh, p)
			}
		}
		return len(fresh)
	}).WithTimeout(waitLong).Should(Equal(2))
	for i := range fresh {
		markPodRunning(t, h.c, &fresh[i], 0)
	}
	for _, p := range old {
		g.Eventually(func() bool {
			pod := &corev1.Pod{}
			err := h.c.Get(ctx, key(h.ns, p.Name), pod)
			return apierrors.IsNotFound(err) || pod.DeletionTimestamp != nil
		}).WithTimeout(waitLong).Should(BeTrue(), "stale member %s retired", p.Name)
	}
	g.Eventually(func() int32 { return h.getPool().Status.ReadyMembers }).WithTimeout(waitLong).Should(Equal(int32(2)))
	g.Expect(h.c.Create(ctx, h.claim("after-rollout"))).To(Succeed())
	g.Eventually(func() airlockv1.SandboxPhase { return getSandbox(t, h.c, h.ns, "after-rollout").Status.Phase }).WithTimeout(waitLong).Should(Equal(airlockv1.PhaseReady))
	s := getSandbox(t, h.c, h.ns, "after-rollout")
	g.Expect(s.Status.Pool.Result).To(Equal(airlockv1.ClaimWarm))
	g.Expect(s.Status.Pool.TemplateGeneration).To(Equal(tmpl.Generation))
	g.Expect(s.Status.Image).To(Equal(tmpl.Spec.Image))
}

func TestIntegrationPoolReplacesDeadAndUnisolatedMembers(t *testing.T) {
	h := newPoolHarness(t, makePool("", "heal", "py", 2))
	g := NewWithT(t)
	ctx := context.Background()
	pods := h.readyMembers(2)
	dead, exposed := pods[0], pods[1]

	dead.Status.Phase = corev1.PodFailed
	dead.Status.Reason = "Evicted"
	g.Expect(h.c.Status().Update(ctx, &dead)).To(Succeed())
	// Another policy selecting one member may allow what its own denies.
	open := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "allow-all"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelPod: exposed.Name}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	g.Expect(h.c.Create(ctx, open)).To(Succeed())

	for _, p := range []corev1.Pod{dead, exposed} {
		g.Eventually(func() bool {
			pod := &corev1.Pod{}
			err := h.c.Get(ctx, key(h.ns, p.Name), pod)
			return apierrors.IsNotFound(err) || pod.DeletionTimestamp != nil
		}).WithTimeout(waitLong).Should(BeTrue(), "member %s replaced", p.Name)
	}
	g.Eventually(func() int { return len(h.members()) }).WithTimeout(waitLong).Should(Equal(2), "and refilled")
	// Neither is ever handed out: with nothing ready, a claim goes cold.
	g.Expect(h.c.Create(ctx, h.claim("after-loss"))).To(Succeed())
	g.Eventually(func() *airlockv1.PoolClaimStatus { return getSandbox(t, h.c, h.ns, "after-loss").Status.Pool }).
		WithTimeout(waitLong).Should(HaveField("Result", airlockv1.ClaimCold))
	p := h.getPool()
	g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, airlockv1.PoolConditionDrained)).To(BeTrue())
}

// A sandbox naming a pool needs the pool's template (a cold fallback uses it), and its poolRef is fixed.
func TestIntegrationPoolRefValidation(t *testing.T) {
	_, c := startEnv(t)
	ns := newNamespace(t, c)
	g := NewWithT(t)
	ctx := context.Background()
	bare := makeSandbox(ns, "bare").image("img").obj()
	bare.Spec.PoolRef = &airlockv1.PoolReference{Name: "p"}
	g.Expect(c.Create(ctx, bare)).To(MatchError(ContainSubstring("spec.poolRef needs spec.templateRef")))

	s := makeSandbox(ns, "s").template("py").obj()
	s.Spec.PoolRef = &airlockv1.PoolReference{Name: "p"}
	g.Expect(c.Create(ctx, s)).To(Succeed())
	s.Spec.PoolRef = &airlockv1.PoolReference{Name: "q"}
	g.Expect(c.Update(ctx, s)).To(MatchError(ContainSubstring("spec.poolRef is immutable")))
	s.Spec.PoolRef = nil
	g.Expect(c.Update(ctx, s)).To(MatchError(ContainSubstring("poolRef are fixed")))

	p := makePool(ns, "p", "py", 2)
	p.Spec.MaxReplicas = ptr.To[int32](1)
	g.Expect(c.Create(ctx, p)).To(MatchError(ContainSubstring("maxReplicas must not be below replicas")))
}
