package sandbox

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExpiresAt is the hard expiry of a sandbox created at created. The first time (previous nil) it is creation
// plus the resolved timeout. Afterwards only a raised spec.timeout moves it, capped by maxTimeout, and it never
// moves earlier: neither a template edit nor a lowered operator cap shortens a running sandbox.
func ExpiresAt(created time.Time, resolvedTimeout time.Duration, specTimeout *metav1.Duration, maxTimeout time.Duration, previous *metav1.Time) time.Time {
	if previous == nil {
		return created.Add(resolvedTimeout)
	}
	at := previous.Time
	if specTimeout != nil {
		if candidate := created.Add(min(specTimeout.Duration, maxTimeout)); candidate.After(at) {
			at = candidate
		}
	}
	return at
}

// IdleDeadline is when a sandbox expires for want of activity: idle after the later of its container's start
// and its last recorded activity. Nil without an idle timeout or before the container started: the idle clock
// runs only once commands can.
func IdleDeadline(startedAt, lastActivity *metav1.Time, idle time.Duration) *metav1.Time {
	if idle <= 0 || startedAt == nil {
		return nil
	}
	from := startedAt.Time
	if lastActivity != nil && lastActivity.After(from) {
		from = lastActivity.Time
	}
	return &metav1.Time{Time: from.Add(idle)}
}

// Expired tells whether the expiry has passed at now.
func Expired(now time.Time, expiresAt *metav1.Time) bool {
	return expiresAt != nil && !now.Before(expiresAt.Time)
}

// UsageSeconds is the sandbox-seconds used between start and end, rounded up: per-second metering bills a
// started second.
func UsageSeconds(startedAt *metav1.Time, end time.Time) int64 {
	if startedAt == nil || !end.After(startedAt.Time) {
		return 0
	}
	d := end.Sub(startedAt.Time)
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return secs
}
