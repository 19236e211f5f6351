package controller

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

func TestFirstExpiry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	tests := map[string]struct {
		hard, idle *metav1.Time
		want       *metav1.Time
		reason     string
	}{
		"no idle timeout: the hard expiry": {at(time.Hour), nil, at(time.Hour), ReasonExpired},
		"idle deadline first":              {at(time.Hour), at(10 * time.Minute), at(10 * time.Minute), ReasonIdleTimeout},
		"hard expiry caps the idle one":    {at(time.Hour), at(2 * time.Hour), at(time.Hour), ReasonExpired},
		"a tie is the hard expiry":         {at(time.Hour), at(time.Hour), at(time.Hour), ReasonExpired},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, reason := firstExpiry(tc.hard, tc.idle)
			if !got.Equal(tc.want) || reason != tc.reason {
				t.Errorf("got %v %s, want %v %s", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestIdleDeadlineFromStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	fired := []metav1.Condition{{Type: airlockv1.ConditionExpired, Status: metav1.ConditionTrue, Reason: ReasonIdleTimeout, LastTransitionTime: *at(11 * time.Minute)}}
	hardFired := []metav1.Condition{{Type: airlockv1.ConditionExpired, Status: metav1.ConditionTrue, Reason: ReasonExpired, LastTransitionTime: *at(11 * time.Minute)}}
	tests := map[string]struct {
		st   airlockv1.SandboxStatus
		want *metav1.Time
	}{
		"from the start":                {airlockv1.SandboxStatus{StartedAt: at(0)}, at(10 * time.Minute)},
		"from the last activity":        {airlockv1.SandboxStatus{StartedAt: at(0), LastActivityAt: at(5 * time.Minute)}, at(15 * time.Minute)},
		"fired stays fired":             {airlockv1.SandboxStatus{StartedAt: at(0), LastActivityAt: at(12 * time.Minute), Conditions: fired}, at(11 * time.Minute)},
		"a hard expiry does not pin it": {airlockv1.SandboxStatus{StartedAt: at(0), LastActivityAt: at(12 * time.Minute), Conditions: hardFired}, at(22 * time.Minute)},
		"not started: no idle deadline": {airlockv1.SandboxStatus{LastActivityAt: at(time.Minute)}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := idleDeadline(&tc.st, 10*time.Minute)
			if (got == nil) != (tc.want == nil) || (got != nil && !got.Equal(tc.want)) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestComputeStatusIdleExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	zero := int32(0)
	running := func(hard, idle *metav1.Time) observation {
		return observation{now: now, policy: policyInEffect, pod: runningPod(&zero), evidence: gvisorEvidence(),
			expiresAt: hard, idleExpiresAt: idle, idleTimeout: 10 * time.Minute}
	}
	tests := map[string]struct {
		obs                   observation
		phase                 airlockv1.SandboxPhase
		ready, expired, words string
	}{
		"idle deadline ahead":   {running(at(time.Hour), at(time.Minute)), airlockv1.PhaseReady, "True/Ready", "False/NotExpired", "or after 10m0s without activity"},
		"idle deadline reached": {running(at(time.Hour), at(0)), airlockv1.PhaseExpired, "False/IdleTimeout", "True/IdleTimeout", "went 10m0s without activity"},
		"hard expiry first":     {running(at(0), at(time.Minute)), airlockv1.PhaseExpired, "False/Expired", "True/Expired", "expires at"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			sbx.Status = computeStatus(sbx, tc.obs)
			if sbx.Status.Phase != tc.phase {
				t.Errorf("phase %s, want %s", sbx.Status.Phase, tc.phase)
			}
			if got := condition(sbx, airlockv1.ConditionReady); got != tc.ready {
				t.Errorf("Ready %s, want %s", got, tc.ready)
			}
			if got := condition(sbx, airlockv1.ConditionExpired); got != tc.expired {
				t.Errorf("Expired %s, want %s", got, tc.expired)
			}
			c := meta.FindStatusCondition(sbx.Status.Conditions, airlockv1.ConditionExpired)
			if !strings.Contains(c.Message, tc.words) || c.ObservedGeneration != 2 {
				t.Errorf("Expired condition %+v, want a message saying %q and observedGeneration 2", c, tc.words)
			}
		})
	}
}

// Activity the gateway records moves only the idle deadline, never a status field the controller writes: the
// gateway's patch is the one write per flush.
func TestActivityCostsNoControllerStatusWrite(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	zero := int32(0)
	obs := observation{now: now, policy: policyInEffect, pod: runningPod(&zero), evidence: gvisorEvidence(),
		expiresAt: &metav1.Time{Time: now.Add(time.Hour)}, idleExpiresAt: &metav1.Time{Time: now.Add(time.Minute)}, idleTimeout: 10 * time.Minute}
	sbx := &airlockv1.Sandbox{}
	sbx.Status = computeStatus(sbx, obs)
	sbx.Status.LastActivityAt = &metav1.Time{Time: now}
	obs.idleExpiresAt = &metav1.Time{Time: now.Add(10 * time.Minute)}
	obs.now = now.Add(time.Second)
	if after := computeStatus(sbx, obs); !equality.Semantic.DeepEqual(after, sbx.Status) {
		t.Errorf("status changed with activity alone:\n%+v\n%+v", sbx.Status, after)
	}
}

// A sandbox the idle timeout expired still says so while it terminates.
func TestTerminatingKeepsTheIdleExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	zero := int32(0)
	started := metav1.NewTime(now.Add(-11 * time.Minute))
	sbx := &airlockv1.Sandbox{Status: airlockv1.SandboxStatus{StartedAt: &started, IdleTimeout: &metav1.Duration{Duration: 10 * time.Minute},
		ExpiresAt: &metav1.Time{Time: now.Add(time.Hour)}}}
	obs := observation{now: now, policy: policyInEffect, pod: runningPod(&zero), evidence: gvisorEvidence(), expiresAt: sbx.Status.ExpiresAt,
		idleTimeout: 10 * time.Minute, idleExpiresAt: idleDeadline(&sbx.Status, 10*time.Minute)}
	sbx.Status = computeStatus(sbx, obs)
	// Activity recorded after the expiry (a command that was still running) does not undo it.
	sbx.Status.LastActivityAt = &metav1.Time{Time: now.Add(time.Second)}
	sbx.Status = computeStatus(sbx, terminating(sbx, now.Add(2*time.Second)))
	if sbx.Status.Phase != airlockv1.PhaseTerminating || condition(sbx, airlockv1.ConditionExpired) != "True/IdleTimeout" {
		t.Fatalf("terminating: phase %s, Expired %s", sbx.Status.Phase, condition(sbx, airlockv1.ConditionExpired))
	}
}
