package gateway

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/exec"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/sandbox"
)

// RenewBackground keeps a sandbox whose only activity is a running background process from idling out. The
// sandbox's PID 1 has no API access, so the gateway renews for it: every interval it looks, in its cache, for
// Ready sandboxes with an idle timeout whose idle deadline is less than two intervals away, asks each one's PID 1
// whether a background process runs (one short exec), and if so records activity (Activity.Touch), which the
// next flush writes to status.lastActivityAt. Only sandboxes near their deadline cost an exec, and a sandbox in
// use through calls never gets near it. Every replica does this; the writes stay at most one per interval per
// replica. It returns when ctx ends.
func (s *Server) RenewBackground(ctx context.Context, interval time.Duration, clk clock.WithTicker) {
	pc, ok := s.opts.Engine.(ProcessController)
	if !ok || s.opts.Activity == nil || interval <= 0 {
		return
	}
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.renewOnce(ctx, pc, interval, clk.Now())
	}
}

func (s *Server) renewOnce(ctx context.Context, pc ProcessController, interval time.Duration, now time.Time) {
	var list airlockv1.SandboxList
	if err := s.opts.Reader.List(ctx, &list); err != nil {
		s.opts.Logger.Error(err, "listing sandboxes to renew their background processes")
		return
	}
	for i := range list.Items {
		sb := &list.Items[i]
		if !nearIdleDeadline(sb, interval, now) {
			continue
		}
		if running, err := backgroundRunning(ctx, pc, s.target(sb)); err != nil {
			s.opts.Logger.V(1).Info("asking a sandbox for its background processes", "namespace", sb.Namespace, "sandbox", sb.Name, "error", err.Error())
		} else if running {
			s.opts.Activity.Touch(sb.Namespace, sb.Name)
		}
	}
}

// nearIdleDeadline reports whether sb is Ready, has an idle timeout, and will idle out within two intervals:
// a touch now is written within one.
func nearIdleDeadline(sb *airlockv1.Sandbox, interval time.Duration, now time.Time) bool {
	if sb.DeletionTimestamp != nil || sb.Status.Phase != airlockv1.PhaseReady {
		return false
	}
	idle := sb.Status.IdleTimeout
	if idle == nil {
		idle = sb.Spec.IdleTimeout
	}
	if idle == nil {
		return false
	}
	at := sandbox.IdleDeadline(sb.Status.StartedAt, sb.Status.LastActivityAt, idle.Duration)
	return at != nil && at.Sub(now) < 2*interval
}

func backgroundRunning(ctx context.Context, pc ProcessController, target exec.Request) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := pc.Control(ctx, target, runwrap.Request{Op: runwrap.OpList})
	if err != nil {
		return false, err
	}
	for _, p := range rep.Processes {
		if p.Background && p.Running {
			return true, nil
		}
	}
	return false, nil
}
