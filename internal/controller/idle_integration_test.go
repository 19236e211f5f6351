package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// idleHarness drives one sandbox's deadlines with the controller's fake clock, playing the gateway's part
// (the status.lastActivityAt patch) by hand.
type idleHarness struct {
	t        *testing.T
	c        client.Client
	clk      *clocktesting.FakePassiveClock
	ns, name string
	nudges   int
}

func newIdleHarness(t *testing.T, s *airlockv1.Sandbox) *idleHarness {
	_, c := startEnv(t)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	startManager(t, managerOptions{clock: clk})
	s.Namespace = newNamespace(t, c)
	createReady(t, c, s)
	return &idleHarness{t: t, c: c, clk: clk, ns: s.Namespace, name: s.Name}
}

func (h *idleHarness) get() *airlockv1.Sandbox { return getSandbox(h.t, h.c, h.ns, h.name) }

// at sets the controller's clock and makes it look again now (its RequeueAfter runs on the real clock).
func (h *idleHarness) at(now time.Time) {
	h.t.Helper()
	h.clk.SetTime(now)
	h.nudges++
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.airlock.dev/nudge":"%d"}}}`, h.nudges)
	s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.name}}
	NewWithT(h.t).Expect(h.c.Patch(context.Background(), s, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// activity records activity at t the way the gateway does: a merge patch of status.lastActivityAt.
func (h *idleHarness) activity(t time.Time) {
	h.t.Helper()
	patch := fmt.Appendf(nil, `{"status":{"lastActivityAt":%q}}`, t.UTC().Format(time.RFC3339))
	s := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.name}}
	NewWithT(h.t).Expect(h.c.Status().Patch(context.Background(), s, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

func (h *idleHarness) staysReady() {
	h.t.Helper()
	NewWithT(h.t).Consistently(func(g Gomega) {
		s := h.get()
		g.Expect(s.DeletionTimestamp).To(BeNil())
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseReady))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

func (h *idleHarness) deletedWith(reason string) {
	h.t.Helper()
	g := NewWithT(h.t)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.c.Get(context.Background(), key(h.ns, h.name), &airlockv1.Sandbox{}))
	}).WithTimeout(waitLong).WithPolling(100 * time.Millisecond).Should(BeTrue())
	g.Eventually(func() []string { return eventReasons(h.t, h.c, h.ns, h.name) }).WithTimeout(waitLong).Should(ContainElements(reason, "Deleted"))
}

// TestIntegrationIdleTimeoutExpiresSandbox: a sandbox with a 10-minute idle timeout lives while activity keeps
// coming, each recorded activity pushes its deadline, and 10 minutes after the last one it is expired (reason
// IdleTimeout) and deleted long before its hard expiry, by the same path as the hard expiry.
func TestIntegrationIdleTimeoutExpiresSandbox(t *testing.T) {
	h := newIdleHarness(t, makeSandbox("", "idle").image("img:1").timeout(time.Hour).idleTimeout(10*time.Minute).obj())
	g := NewWithT(t)
	s := h.get()
	g.Expect(s.Status.IdleTimeout).To(Equal(&metav1.Duration{Duration: 10 * time.Minute}))
	g.Expect(s.Status.StartedAt).NotTo(BeNil())
	started := s.Status.StartedAt.Time
	g.Expect(conditionMessage(&s.Status, airlockv1.ConditionExpired)).To(ContainSubstring("or after 10m0s without activity"))

	h.at(started.Add(9 * time.Minute))
	h.staysReady()

	// Activity pushes the deadline: recorded at +8m, the sandbox outlives +10m.
	h.activity(started.Add(8 * time.Minute))
	h.at(started.Add(17 * time.Minute))
	h.staysReady()
	g.Expect(h.get().Status.LastActivityAt.Time).To(BeTemporally("==", started.Add(8*time.Minute)))

	h.at(started.Add(18*time.Minute + time.Second))
	h.deletedWith(ReasonIdleTimeout)
}

// TestIntegrationIdleTimeoutHardTimeoutCaps: activity keeps the idle deadline ahead, but the hard expiry still
// ends the sandbox, with reason Expired.
func TestIntegrationIdleTimeoutHardTimeoutCaps(t *testing.T) {
	h := newIdleHarness(t, makeSandbox("", "capped").image("img:1").timeout(30*time.Minute).idleTimeout(20*time.Minute).obj())
	expires := h.get().Status.ExpiresAt.Time

	h.activity(expires.Add(-5 * time.Minute))
	h.at(expires.Add(-time.Minute))
	h.staysReady()

	h.at(expires.Add(time.Second))
	h.deletedWith("Expired")
	NewWithT(t).Expect(eventReasons(t, h.c, h.ns, h.name)).NotTo(ContainElement(ReasonIdleTimeout))
}

// TestIntegrationIdleTimeoutValidation: the API server refuses an idle timeout that is not positive or longer
// than the hard timeout, and keeps it fixed; the template's default obeys its own timeout.
func TestIntegrationIdleTimeoutValidation(t *testing.T) {
	_, c := startEnv(t)
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	for want, s := range map[string]*airlockv1.Sandbox{
		"spec.idleTimeout must be greater than 0s":      makeSandbox(ns, "zero").image("x").idleTimeout(0).obj(),
		"spec.idleTimeout must not exceed spec.timeout": makeSandbox(ns, "long").image("x").timeout(time.Hour).idleTimeout(2 * time.Hour).obj(),
	} {
		err := c.Create(ctx, s)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", want, err)
		g.Expect(err.Error()).To(ContainSubstring(want))
	}
	s := makeSandbox(ns, "fixed").image("x").timeout(time.Hour).idleTimeout(10 * time.Minute).obj()
	g.Expect(c.Create(ctx, s)).To(Succeed())
	s.Spec.IdleTimeout = &metav1.Duration{Duration: 20 * time.Minute}
	g.Expect(c.Update(ctx, s)).To(MatchError(ContainSubstring("spec.idleTimeout is immutable")))

	tpl := makeTemplate(ns, "bad", "img").defaultTimeout(10 * time.Minute).obj()
	tpl.Spec.DefaultIdleTimeout = &metav1.Duration{Duration: time.Hour}
	g.Expect(c.Create(ctx, tpl)).To(MatchError(ContainSubstring("defaultIdleTimeout must not exceed defaultTimeout")))
}
