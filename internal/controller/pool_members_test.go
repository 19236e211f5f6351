package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// A member is judged as a Sandbox would be; one that stays unready past its start deadline is replaced, one of
// another generation or pod spec is stale and never claimed.
func TestClassifyMember(t *testing.T) {
	created := time.Unix(1000, 0)
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "m",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "m"}}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelPod: "m"}}}}
	want := memberWant{generation: 2, hash: "h", policy: func(string) *networkingv1.NetworkPolicy { return np.DeepCopy() }}
	pod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m", CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{sandbox.LabelPod: "m"},
			Annotations: map[string]string{sandbox.AnnotationTemplateGeneration: "2", sandbox.AnnotationMemberHash: "h"}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		policy   *networkingv1.NetworkPolicy
		deadline time.Time
		kind     memberKind
		stale    bool
		unlinked bool
	}{
		{name: "starting", pod: pod(nil), policy: np, kind: memberStarting},
		{name: "starting within its time", pod: pod(nil), policy: np, deadline: created.Add(-time.Second), kind: memberStarting},
		{name: "stuck starting", pod: pod(nil), policy: np, deadline: created.Add(time.Second), kind: memberUnusable},
		{name: "no policy", pod: pod(nil), kind: memberUnusable},
		{name: "policy not yet owned by its pod", pod: pod(nil), policy: &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: np.Spec},
			kind: memberStarting, unlinked: true},
		{name: "stopped", pod: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), policy: np, kind: memberUnusable},
		{name: "older generation", pod: pod(func(p *corev1.Pod) { p.Annotations[sandbox.AnnotationTemplateGeneration] = "1" }), policy: np, kind: memberStarting, stale: true},
		{name: "other pod spec", pod: pod(func(p *corev1.Pod) { p.Annotations[sandbox.AnnotationMemberHash] = "x" }), policy: np, kind: memberStarting, stale: true},
	} {
		w := want
		w.startDeadline = tc.deadline
		m := classifyMember(tc.pod, tc.policy, nil, nil, w)
		if m.kind != tc.kind || m.stale != tc.stale || m.unlinked != tc.unlinked {
			t.Errorf("%s: kind %d stale %v unlinked %v (%s), want %d %v %v", tc.name, m.kind, m.stale, m.unlinked, m.why, tc.kind, tc.stale, tc.unlinked)
		}
	}
}

// A claim holds the pool's refill only while it is undecided and young: not once it has a result or a pod,
// not while it waits for a member (the refill is what it waits for), not while it is deleted, and not past
// pendingClaimWindow.
func TestClaimPending(t *testing.T) {
	now := time.Unix(10_000, 0)
	young := metav1.NewTime(now.Add(-time.Second))
	waiting := []metav1.Condition{{Type: airlockv1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonWaitingForMember}}
	for name, tc := range map[string]struct {
		s    airlockv1.Sandbox
		want bool
	}{
		"new":     {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: young}}, true},
		"warm":    {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: young}, Status: airlockv1.SandboxStatus{Pool: &airlockv1.PoolClaimStatus{Result: airlockv1.ClaimWarm}}}, false},
		"has pod": {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: young}, Status: airlockv1.SandboxStatus{PodName: "p"}}, false},
		"waiting": {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: young}, Status: airlockv1.SandboxStatus{Conditions: waiting}}, false},
		"deleted": {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: young, DeletionTimestamp: &young}}, false},
		"old":     {airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-pendingClaimWindow))}}, false},
	} {
		if got := claimPending(&tc.s, now); got != tc.want {
			t.Errorf("%s: %t, want %t", name, got, tc.want)
		}
	}
}
