package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

func runningPod(gateExit *int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	if gateExit != nil {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: sandbox.InitContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: *gateExit}}}}
	}
	return p
}

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later := &metav1.Time{Time: now.Add(time.Hour)}
	zero, one := int32(0), int32(1)
	failed := runningPod(&zero)
	failed.Status.Phase = corev1.PodFailed
	pulling := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: sandbox.ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}}}

	tests := map[string]struct {
		obs                      observation
		phase                    airlockv1.SandboxPhase
		ready, isolated, expired string
		readyMessage             string
	}{
		"no pod yet": {observation{policy: policyInEffect},
			airlockv1.PhasePending, "False/Creating", "False/GatePending", "False/NotExpired", ""},
		"running, gate passed": {observation{policy: policyInEffect, pod: runningPod(&zero)},
			airlockv1.PhaseReady, "True/Ready", "True/Isolated", "False/NotExpired", ""},
		"running, gate not finished": {observation{policy: policyInEffect, pod: runningPod(nil)},
			airlockv1.PhasePending, "False/NotIsolated", "False/GatePending", "False/NotExpired", ""},
		"gate failed": {observation{policy: policyInEffect, pod: runningPod(&one)},
			airlockv1.PhasePending, "False/NotIsolated", "False/GateFailed", "False/NotExpired", ""},
		"another policy selects the pod": {observation{policy: policyInEffect, pod: runningPod(&zero), others: []string{"open"}},
			airlockv1.PhasePending, "False/NotIsolated", "False/OtherPolicySelects", "False/NotExpired", ""},
		"policy edited": {observation{policy: policyModified, pod: runningPod(&zero)},
			airlockv1.PhasePending, "False/NotIsolated", "False/PolicyModified", "False/NotExpired", ""},
		"image missing says why": {observation{policy: policyInEffect, pod: pulling},
			airlockv1.PhasePending, "False/Starting", "False/GatePending", "False/NotExpired", "ErrImageNeverPull"},
		"pod failed": {observation{policy: policyInEffect, pod: failed},
			airlockv1.PhaseFailed, "False/PodFailed", "True/Isolated", "False/NotExpired", ""},
		"pod lost": {observation{policy: policyInEffect, podLost: true},
			airlockv1.PhaseFailed, "False/PodLost", "False/GatePending", "False/NotExpired", ""},
		"template missing": {observation{blocked: &blocker{reason: ReasonTemplateNotFound, message: "no template"}},
			airlockv1.PhasePending, "False/TemplateNotFound", "False/PolicyMissing", "False/NotExpired", "no template"},
		"name conflict is permanent": {observation{blocked: &blocker{reason: ReasonNameConflict, permanent: true}},
			airlockv1.PhaseFailed, "False/NameConflict", "False/PolicyMissing", "False/NotExpired", ""},
		"expired": {observation{policy: policyInEffect, pod: runningPod(&zero), expiresAt: &metav1.Time{Time: now}},
			airlockv1.PhaseExpired, "False/Expired", "True/Isolated", "True/Expired", ""},
		"deleting": {observation{policy: policyInEffect, deleting: true},
			airlockv1.PhaseTerminating, "False/Terminating", "False/GatePending", "False/NotExpired", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			tc.obs.now = now
			if tc.obs.expiresAt == nil {
				tc.obs.expiresAt = later
			}
			st := computeStatus(sbx, tc.obs)
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			sbx.Status = st
			for typ, want := range map[string]string{airlockv1.ConditionReady: tc.ready, airlockv1.ConditionNetworkIsolated: tc.isolated, airlockv1.ConditionExpired: tc.expired} {
				if got := condition(sbx, typ); got != want {
					t.Errorf("%s: %s, want %s", typ, got, want)
				}
				if c := meta.FindStatusCondition(st.Conditions, typ); c.ObservedGeneration != 3 {
					t.Errorf("%s: observedGeneration %d, want 3", typ, c.ObservedGeneration)
				}
			}
			if msg := meta.FindStatusCondition(st.Conditions, airlockv1.ConditionReady).Message; tc.readyMessage != "" && !strings.Contains(msg, tc.readyMessage) {
				t.Errorf("Ready message %q does not say %q", msg, tc.readyMessage)
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTimesAndUsage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	zero := int32(0)
	sbx := &airlockv1.Sandbox{}
	started := metav1.NewTime(t0)
	pod := runningPod(&zero)
	pod.Status.ContainerStatuses[0].State.Running.StartedAt = started
	obs := observation{now: t0.Add(10 * time.Second), policy: policyInEffect, pod: pod, expiresAt: &metav1.Time{Time: t0.Add(time.Hour)}}
	sbx.Status = computeStatus(sbx, obs)
	if sbx.Status.Usage == nil || sbx.Status.Usage.SandboxSeconds != 10 {
		t.Fatalf("usage at the Ready transition: %+v, want 10s", sbx.Status.Usage)
	}
	first := meta.FindStatusCondition(sbx.Status.Conditions, airlockv1.ConditionReady).LastTransitionTime

	obs.now = obs.now.Add(time.Minute)
	again := computeStatus(sbx, obs)
	if got := meta.FindStatusCondition(again.Conditions, airlockv1.ConditionReady).LastTransitionTime; !got.Equal(&first) {
		t.Errorf("unchanged condition moved its transition time: %v -> %v", first, got)
	}
	if again.Usage.SandboxSeconds != 10 {
		t.Errorf("usage must change only on transitions (so status is not rewritten every reconcile), got %d", again.Usage.SandboxSeconds)
	}
}
