package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestIntegrationTTLExpiryDeletesSandbox drives the hard expiry with the injected clock instead of real
// seconds: a 30-minute sandbox lives through 29 minutes of (fake) time, and one step past its expiry it is
// marked Expired and deleted with its pod and policy. Only the reconciler's sense of "now" is faked; the API
// server's creation timestamp is real, which is why the fake clock starts at the real time.
func TestIntegrationTTLExpiryDeletesSandbox(t *testing.T) {
	_, c := startEnv(t)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	startManager(t, managerOptions{clock: clk})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	createReady(t, c, makeSandbox(ns, "short").image("img:1").timeout(30*time.Minute).obj())
	expires := getSandbox(t, c, ns, "short").Status.ExpiresAt
	g.Expect(expires).NotTo(BeNil())

	// nudge makes the reconciler look again now (its RequeueAfter runs on the real clock).
	nudge := func(n string) {
		t.Helper()
		s := getSandbox(t, c, ns, "short")
		patch := client.MergeFrom(s.DeepCopy())
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["test.airlock.dev/nudge"] = n
		g.Expect(c.Patch(ctx, s, patch)).To(Succeed())
	}

	clk.SetTime(expires.Add(-time.Minute))
	nudge("1")
	g.Consistently(func(g Gomega) {
		s := getSandbox(t, c, ns, "short")
		g.Expect(s.DeletionTimestamp).To(BeNil())
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhaseReady))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	clk.SetTime(expires.Add(time.Second))
	nudge("2")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, key(ns, "short"), &airlockv1.Sandbox{}))
	}).WithTimeout(waitLong).WithPolling(100 * time.Millisecond).Should(BeTrue())
	g.Expect(c.Get(ctx, key(ns, "short"), &corev1.Pod{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
	g.Expect(c.Get(ctx, key(ns, "short"), &networkingv1.NetworkPolicy{})).To(MatchError(apierrors.IsNotFound, "IsNotFound"))
	g.Eventually(func() []string { return eventReasons(t, c, ns, "short") }).WithTimeout(waitLong).Should(ContainElements("Expired", "Deleted"))
}

// The usage record is written before the finalizer goes and named by the sandbox's UID: a finalize retried
// after a crash that came between the two (here: the record already exists) writes no second one, and a
// deletion leaves exactly one.
func TestIntegrationUsageRecordedExactlyOnce(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	for _, name := range []string{"crashed", "plain"} {
		createReady(t, c, makeSandbox(ns, name).image("img:1").obj())
	}
	crashed := getSandbox(t, c, ns, "crashed")
	earlier := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("crashed.%s.usage", crashed.UID)}, EventTime: metav1.NowMicro(),
		ReportingController: ReportingController, ReportingInstance: ReportingController, Action: "Delete", Reason: "Deleted",
		Type: corev1.EventTypeNormal, Note: "sandbox removed after 7 sandbox-seconds (size small)",
		Regarding: corev1.ObjectReference{APIVersion: airlockv1.GroupVersion.String(), Kind: "Sandbox", Namespace: ns, Name: "crashed", UID: crashed.UID},
	}
	g.Expect(c.Create(ctx, earlier)).To(Succeed())
	for _, name := range []string{"crashed", "plain"} {
		g.Expect(c.Delete(ctx, getSandbox(t, c, ns, name))).To(Succeed())
	}
	for _, name := range []string{"crashed", "plain"} {
		g.Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, key(ns, name), &airlockv1.Sandbox{})) }).
			WithTimeout(waitLong).Should(BeTrue())
	}
	g.Consistently(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		notes := map[string][]string{}
		for _, e := range list.Items {
			if e.Reason == "Deleted" {
				notes[e.Regarding.Name] = append(notes[e.Regarding.Name], e.Note)
			}
		}
		g.Expect(notes["crashed"]).To(Equal([]string{earlier.Note}))
		g.Expect(notes["plain"]).To(HaveLen(1))
		g.Expect(notes["plain"][0]).To(ContainSubstring("sandbox-seconds"))
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// A sandbox deleted with its namespace is not held by its usage record: nothing can be created in a namespace
// being deleted, and the finalizer goes anyway (the usage is logged and counted). Held for ever without that.
func TestIntegrationNamespaceDeletionIsNotHeldByUsage(t *testing.T) {
	_, c := startEnv(t)
	startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)
	createReady(t, c, makeSandbox(ns, "s").image("img:1").obj())
	// envtest has no namespace controller: the namespace stays Terminating, refusing new content, as it does
	// in a cluster while its content is deleted.
	g.Expect(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(c.Delete(ctx, getSandbox(t, c, ns, "s"))).To(Succeed())
	g.Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, key(ns, "s"), &airlockv1.Sandbox{})) }).
		WithTimeout(waitLong).Should(BeTrue())
}
