package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// A sandbox ends at the earlier of two absolute deadlines, enforced the same way: the hard expiry
// (status.expiresAt, fixed at creation) and the idle deadline (the later of status.startedAt and
// status.lastActivityAt, plus the idle timeout). Activity is read only from status.lastActivityAt, which the
// gateway alone writes, at most once per sandbox per --activity-flush-interval: the idle deadline is precise to
// that interval.

// firstExpiry is the deadline that ends the sandbox first and the reason it carries: ReasonExpired for the hard
// expiry, ReasonIdleTimeout for the idle deadline. The hard expiry wins a tie.
func firstExpiry(hard, idle *metav1.Time) (*metav1.Time, string) {
	if idle != nil && (hard == nil || idle.Before(hard)) {
		return idle, ReasonIdleTimeout
	}
	return hard, ReasonExpired
}

// expired tells whether either deadline has passed.
func (o observation) expired() bool {
	at, _ := firstExpiry(o.expiresAt, o.idleExpiresAt)
	return sandbox.Expired(o.now, at)
}

// idleDeadline is the idle deadline status implies. Once the idle timeout fired it stays fired: activity
// recorded afterwards (by a command that was already running) does not revive a sandbox on its way out.
func idleDeadline(st *airlockv1.SandboxStatus, idle time.Duration) *metav1.Time {
	at := sandbox.IdleDeadline(st.StartedAt, st.LastActivityAt, idle)
	c := meta.FindStatusCondition(st.Conditions, airlockv1.ConditionExpired)
	if at != nil && c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonIdleTimeout && c.LastTransitionTime.Before(at) {
		return c.LastTransitionTime.DeepCopy()
	}
	return at
}

// expiredCondition says whether the sandbox expired and by which deadline. While it runs the message names the
// hard expiry and the idle timeout but not the idle deadline, which moves with activity: recorded activity then
// costs no status write of the controller's own.
func expiredCondition(obs observation) metav1.Condition {
	c := metav1.Condition{Type: airlockv1.ConditionExpired, Status: metav1.ConditionFalse, Reason: ReasonNotExpired}
	hard := "unknown"
	if obs.expiresAt != nil {
		hard = obs.expiresAt.UTC().Format(time.RFC3339)
		c.Message = "expires at " + hard
	}
	if obs.idleTimeout > 0 {
		c.Message = fmt.Sprintf("%s, or after %s without activity", c.Message, obs.idleTimeout)
	}
	at, reason := firstExpiry(obs.expiresAt, obs.idleExpiresAt)
	if !sandbox.Expired(obs.now, at) {
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, reason
	if reason == ReasonIdleTimeout {
		c.Message = fmt.Sprintf("went %s without activity (idle timeout), before its hard expiry at %s", obs.idleTimeout, hard)
	}
	return c
}
