package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

func TestDesiredFollowsDemandWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		replicas int32
		max      *int32
		demand   int32
		want     int32
	}{
		{replicas: 3, demand: 10, want: 3},
		{replicas: 3, max: ptr.To[int32](8), demand: 1, want: 3},
		{replicas: 3, max: ptr.To[int32](8), demand: 5, want: 5},
		{replicas: 3, max: ptr.To[int32](8), demand: 50, want: 8},
		{replicas: 0, max: ptr.To[int32](4), demand: 0, want: 0},
	} {
		p := &airlockv1.SandboxPool{Spec: airlockv1.SandboxPoolSpec{Replicas: tc.replicas, MaxReplicas: tc.max}}
		if got := desired(p, tc.demand); got != tc.want {
			t.Errorf("replicas %d max %v demand %d: %d, want %d", tc.replicas, tc.max, tc.demand, got, tc.want)
		}
	}
}

// Status counts only members that stay (unusable ones are being deleted), tells stale from current ones, and
// is Drained exactly when no current member is ready.
func TestComputePoolStatus(t *testing.T) {
	pool := &airlockv1.SandboxPool{Spec: airlockv1.SandboxPoolSpec{Replicas: 2}}
	pool.Generation = 4
	res := sandbox.Resolved{}
	for _, tc := range []struct {
		name               string
		members            []member
		ready, stale, n    int32
		readyCond, drained bool
	}{
		{"empty", nil, 0, 0, 0, false, true},
		{"filling", []member{{kind: memberReady}, {kind: memberStarting, pod: &corev1.Pod{}}}, 1, 0, 2, false, false},
		{"full", []member{{kind: memberReady}, {kind: memberReady}, {kind: memberUnusable}}, 2, 0, 2, true, false},
		{"only stale ready", []member{{kind: memberReady, stale: true}, {kind: memberStarting, pod: &corev1.Pod{}}}, 0, 1, 2, false, true},
	} {
		st := computePoolStatus(pool, poolObservation{now: time.Unix(100, 0), members: tc.members, resolved: &res, want: memberWant{generation: 7}})
		if st.ReadyMembers != tc.ready || st.StaleMembers != tc.stale || st.Members != tc.n || st.TemplateGeneration != 7 || st.Desired != 2 {
			t.Errorf("%s: %+v", tc.name, st)
		}
		if got := meta.IsStatusConditionTrue(st.Conditions, airlockv1.PoolConditionReady); got != tc.readyCond {
			t.Errorf("%s: Ready %v", tc.name, got)
		}
		if got := meta.IsStatusConditionTrue(st.Conditions, airlockv1.PoolConditionDrained); got != tc.drained {
			t.Errorf("%s: Drained %v", tc.name, got)
		}
		for _, c := range st.Conditions {
			if c.ObservedGeneration != 4 {
				t.Errorf("%s: condition %s without ObservedGeneration", tc.name, c.Type)
			}
		}
	}
}

// A pool short of its replicas because members cannot start says why in its Ready condition, quoting the same
// pod on every pass; members that are merely starting add nothing.
func TestPoolReadySaysWhyMembersAreHeld(t *testing.T) {
	pool := &airlockv1.SandboxPool{Spec: airlockv1.SandboxPoolSpec{Replicas: 4}}
	unschedulable := func(name string) member {
		return member{kind: memberStarting, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/1 nodes are available: 1 Insufficient cpu."}},
		}}}
	}
	starting := member{kind: memberStarting, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-starting"}}}
	ready := func(members ...member) *metav1.Condition {
		st := computePoolStatus(pool, poolObservation{now: time.Unix(100, 0), members: members, resolved: &sandbox.Resolved{}, want: memberWant{generation: 1}})
		return meta.FindStatusCondition(st.Conditions, airlockv1.PoolConditionReady)
	}
	want := "1 of 4 members ready (template generation 1), 0 of an older generation being replaced; " +
		"2 starting members are held up, e.g. pod p-1: not scheduled: 0/1 nodes are available: 1 Insufficient cpu."
	for _, order := range [][]member{
		{{kind: memberReady}, starting, unschedulable("p-2"), unschedulable("p-1")},
		{unschedulable("p-1"), unschedulable("p-2"), starting, {kind: memberReady}},
	} {
		if c := ready(order...); c.Reason != ReasonPoolFilling || c.Message != want {
			t.Errorf("%s: %q, want %q", c.Reason, c.Message, want)
		}
	}
	if c := ready(member{kind: memberReady}, starting); c.Message != "1 of 4 members ready (template generation 1), 0 of an older generation being replaced" {
		t.Errorf("starting only: %q", c.Message)
	}
}
