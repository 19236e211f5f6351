package gateway

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

func TestCreateRequestIdleTimeout(t *testing.T) {
	tests := map[string]struct {
		timeout, idle *int
		bad           bool
	}{
		"none":                    {nil, nil, false},
		"alone":                   {nil, ptrTo(10), false},
		"equal to the timeout":    {ptrTo(30), ptrTo(30), false},
		"longer than the timeout": {ptrTo(30), ptrTo(31), true},
		"zero":                    {nil, ptrTo(0), true},
		"over the operator's cap": {nil, ptrTo(MaxTimeoutMinutes + 1), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := (&CreateRequest{TimeoutMinutes: tc.timeout, IdleTimeoutMinutes: tc.idle}).validate()
			if (e != nil) != tc.bad || (e != nil && e.Field != "idle_timeout_minutes") {
				t.Errorf("validate: %v, want bad=%v naming idle_timeout_minutes", e, tc.bad)
			}
		})
	}
}

// The view shows the idle timeout in force and the deadline that recorded activity implies.
func TestViewShowsIdleDeadline(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	active := metav1.NewTime(started.Add(3 * time.Minute))
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Status: airlockv1.SandboxStatus{
		PodName: "s", StartedAt: &started, LastActivityAt: &active, IdleTimeout: &metav1.Duration{Duration: 10 * time.Minute}}}
	v := viewOf(sb, started.Add(5*time.Minute))
	if v.IdleTimeoutMinutes == nil || *v.IdleTimeoutMinutes != 10 || v.LastActivityAt == nil || !v.LastActivityAt.Equal(active.Time) ||
		v.IdleExpiresAt == nil || !v.IdleExpiresAt.Equal(started.Add(13*time.Minute)) {
		t.Fatalf("view %+v", v)
	}
	if v := viewOf(&airlockv1.Sandbox{}, started.Time); v.IdleTimeoutMinutes != nil || v.IdleExpiresAt != nil {
		t.Fatalf("no idle timeout, view %+v", v)
	}
}
