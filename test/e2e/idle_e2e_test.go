package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestGatewayIdleTimeout: a sandbox with a 45 s idle timeout, used through a gateway that records activity every
// 5 s, survives well past 45 s while an exec comes every 10 s; left alone, it is expired with reason
// IdleTimeout about 45 s after its last exec (not before, and within the flush interval and a reconcile after),
// long before its 30-minute hard expiry.
func TestGatewayIdleTimeout(t *testing.T) {
	const idle, flush = 45 * time.Second, 5 * time.Second
	g, err := startGateway("--activity-flush-interval=" + flush.String())
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	defer g.stop()
	ns, key := gatewayTenant(t, 5)
	const name = "idle"
	createSandbox(t, ns, name, withTimeout(30*time.Minute), func(s *airlockv1.Sandbox) {
		s.Spec.IdleTimeout = &metav1.Duration{Duration: idle}
	})
	started := waitReady(t, ns, name).Status.StartedAt.Time

	// In use for twice the idle timeout.
	var last time.Time
	for time.Since(started) < 2*idle {
		if res := g.execCmd(t, key, name, "true", 10_000); res["exit_code"] != float64(0) {
			t.Fatalf("exec: %v", res)
		}
		last = time.Now()
		time.Sleep(10 * time.Second)
	}
	s, err := getSandbox(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.Phase != airlockv1.PhaseReady || s.Status.LastActivityAt == nil || !s.Status.LastActivityAt.After(started.Add(idle)) {
		t.Fatalf("after %v of use: phase %s, lastActivityAt %v (started %v)", time.Since(started).Round(time.Second), s.Status.Phase, s.Status.LastActivityAt, started)
	}
	t.Logf("in use for %v: still ready, lastActivityAt %v", time.Since(started).Round(time.Second), s.Status.LastActivityAt.Time)

	// Idle: the first sign of expiry (phase Expired, deletion, or gone) comes idle after the last exec.
	var ended time.Time
	var reason string
	eventually(t, idle+flush+time.Minute, "sandbox expired for being idle", func() error {
		s, err := getSandbox(ns, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		case s.Status.Phase == airlockv1.PhaseExpired || s.DeletionTimestamp != nil:
			if c := meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionExpired); c != nil {
				reason = c.Reason
			}
		default:
			return fmt.Errorf("phase %s", s.Status.Phase)
		}
		ended = time.Now()
		return nil
	})
	after := ended.Sub(last)
	t.Logf("expired %v after the last exec (idle timeout %v, flush interval %v), Expired reason %q", after.Round(100*time.Millisecond), idle, flush, reason)
	// metav1.Time has one-second precision, so the recorded activity may be up to a second early; the last
	// exec's own clock reading is a moment after its activity.
	if after < idle-2*time.Second || after > idle+flush+10*time.Second {
		t.Errorf("expired %v after the last exec; want about %v (at most %v + %v + a reconcile later)", after, idle, idle, flush)
	}
	if reason != "" && reason != "IdleTimeout" {
		t.Errorf("Expired condition reason %q, want IdleTimeout", reason)
	}
	eventually(t, time.Minute, "IdleTimeout event", func() error {
		evs, err := sandboxEvents(context.Background(), ns, name, "IdleTimeout")
		if err == nil && len(evs) == 0 {
			err = fmt.Errorf("no IdleTimeout event yet")
		}
		return err
	})
}
