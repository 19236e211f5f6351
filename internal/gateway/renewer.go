package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/sandbox"
)

// Bounds of the renewer's checks on one replica. Each check is one control call to a sandbox's PID 1 on an exec
// slot of the sandbox's tenant, within the memory budget; a check that cannot have its slot or its memory waits
// for the next interval.
const (
	// renewChecks bounds the checks in flight over all tenants.
	renewChecks = 16
	// renewChecksPerTenant bounds one tenant's: its slow or hung sandboxes hold no more than this, and the
	// other tenants' checks go on beside them.
	renewChecksPerTenant = 4
	// renewCheckTimeout bounds one check (an answering PID 1 takes well under a second).
	renewCheckTimeout = 15 * time.Second
)

// RenewBackground keeps a sandbox whose only activity is a running background process from idling out. The
// sandbox's PID 1 has no API access, so the gateway renews for it: every interval it looks, in its cache, for
// Ready sandboxes with an idle timeout whose idle deadline is less than two intervals away, asks each one's PID 1
// whether a background process runs (one control call), and if so records activity (Activity.Touch), which the
// next flush writes to status.lastActivityAt. Only sandboxes near their deadline cost a call, and a sandbox in
// use through calls never gets near it. Checks run in parallel, renewChecks at most and renewChecksPerTenant per
// tenant, taken in turn from each tenant, so that one tenant's hung sandboxes cannot hold up another's renewal;
// a check still running at the next interval is not started twice. Every replica does this; the writes stay
// at most one per interval per replica. It returns when ctx ends and its checks have.
func (s *Server) RenewBackground(ctx context.Context, interval time.Duration, clk clock.WithTicker) {
	pc, ok := s.opts.Engine.(ProcessController)
	if !ok || s.opts.Activity == nil || interval <= 0 {
		return
	}
	r := newRenewer()
	defer r.checks.Wait()
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.renewOnce(ctx, r, pc, interval, clk.Now())
	}
}

// renewOnce starts the checks of the sandboxes near their idle deadline that the bounds admit now.
func (s *Server) renewOnce(ctx context.Context, r *renewer, pc ProcessController, interval time.Duration, now time.Time) {
	var list airlockv1.SandboxList
	if err := s.opts.Reader.List(ctx, &list); err != nil {
		s.opts.Logger.Error(err, "listing sandboxes to renew their background processes")
		return
	}
	var due []renewCandidate
	for i := range list.Items {
		sb := &list.Items[i]
		if at, ok := nearIdleDeadline(sb, interval, now); ok {
			due = append(due, renewCandidate{sb: sb, deadline: at})
		}
	}
	for _, c := range r.take(due, now) {
		r.checks.Go(func() {
			defer r.done(c)
			s.renewIfRunning(ctx, pc, c.sb)
		})
	}
}

// renewIfRunning touches sb if its PID 1 says a background process runs. The call holds an exec slot of sb's
// tenant and counts PID 1's reply in its memory budget before reading it.
func (s *Server) renewIfRunning(ctx context.Context, pc ProcessController, sb *airlockv1.Sandbox) {
	tenant := sb.Namespace
	log := s.opts.Logger.V(1).WithValues("namespace", sb.Namespace, "sandbox", sb.Name)
	release, e := s.execs.acquire(tenant)
	if e != nil {
		log.Info("renewal postponed: no exec slot", "reason", e.Message)
		return
	}
	defer release()
	mem, e := s.memory.reserve(tenant, callOverhead)
	if e != nil {
		log.Info("renewal postponed: memory budget", "reason", e.Message)
		return
	}
	defer mem.release()
	ctx, cancel := context.WithTimeout(ctx, renewCheckTimeout)
	defer cancel()
	rep, err := pc.Control(ctx, s.target(sb), runwrap.Request{Op: runwrap.OpList, ReserveReply: func(n int) error {
		return asError(mem.resize(callOverhead + replyCost(n)))
	}})
	if err != nil {
		log.Info("asking a sandbox for its background processes", "error", err.Error())
		return
	}
	for _, p := range rep.Processes {
		if p.Background && p.Running {
			s.opts.Activity.Touch(sb.Namespace, sb.Name)
			return
		}
	}
}

// nearIdleDeadline returns sb's idle deadline if sb is Ready, has an idle timeout, and will idle out within two
// intervals: a touch now is written within one.
func nearIdleDeadline(sb *airlockv1.Sandbox, interval time.Duration, now time.Time) (time.Time, bool) {
	if sb.DeletionTimestamp != nil || sb.Status.Phase != airlockv1.PhaseReady {
		return time.Time{}, false
	}
	idle := sb.Status.IdleTimeout
	if idle == nil {
		idle = sb.Spec.IdleTimeout
	}
	if idle == nil {
		return time.Time{}, false
	}
	at := sandbox.IdleDeadline(sb.Status.StartedAt, sb.Status.LastActivityAt, idle.Duration)
	if at == nil || at.Sub(now) >= 2*interval {
		return time.Time{}, false
	}
	return at.Time, true
}

// renewCandidate is a sandbox due for a check.
type renewCandidate struct {
	sb       *airlockv1.Sandbox
	deadline time.Time
}

func (c renewCandidate) key() types.NamespacedName {
	return types.NamespacedName{Namespace: c.sb.Namespace, Name: c.sb.Name}
}

// renewer is the state of the checks across intervals: which run, how many per tenant, and when each sandbox
// was last tried.
type renewer struct {
	checks sync.WaitGroup

	mu       sync.Mutex
	running  map[types.NamespacedName]bool
	byTenant map[string]int
	total    int
	tried    map[types.NamespacedName]time.Time
}

func newRenewer() *renewer {
	return &renewer{running: map[types.NamespacedName]bool{}, byTenant: map[string]int{},
		tried: map[types.NamespacedName]time.Time{}}
}

// take picks from due the checks to start now and counts them as running. Each tenant's sandboxes are taken
// least recently tried first, then nearest deadline first (so that a tenant's hung sandboxes, tried every
// interval, take turns with its others); tenants are served one check at a time in turn, up to
// renewChecksPerTenant each and renewChecks in all. Sandboxes no longer due are forgotten.
func (r *renewer) take(due []renewCandidate, now time.Time) []renewCandidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	queues := map[string][]renewCandidate{}
	var tenants []string
	isDue := map[types.NamespacedName]bool{}
	for _, c := range due {
		isDue[c.key()] = true
		if r.running[c.key()] {
			continue
		}
		if _, ok := queues[c.sb.Namespace]; !ok {
			tenants = append(tenants, c.sb.Namespace)
		}
		queues[c.sb.Namespace] = append(queues[c.sb.Namespace], c)
	}
	for k := range r.tried {
		if !isDue[k] {
			delete(r.tried, k)
		}
	}
	for _, q := range queues {
		slices.SortStableFunc(q, func(a, b renewCandidate) int {
			if c := r.tried[a.key()].Compare(r.tried[b.key()]); c != 0 {
				return c
			}
			return a.deadline.Compare(b.deadline)
		})
	}
	var start []renewCandidate
	for more := true; more && r.total < renewChecks; {
		more = false
		for _, t := range tenants {
			if q := queues[t]; len(q) > 0 && r.byTenant[t] < renewChecksPerTenant && r.total < renewChecks {
				c := q[0]
				queues[t] = q[1:]
				r.running[c.key()], r.tried[c.key()] = true, now
				r.byTenant[t]++
				r.total++
				start = append(start, c)
				more = true
			}
		}
	}
	return start
}

// done counts c's check as ended.
func (r *renewer) done(c renewCandidate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, c.key())
	if r.byTenant[c.sb.Namespace]--; r.byTenant[c.sb.Namespace] <= 0 {
		delete(r.byTenant, c.sb.Namespace)
	}
	r.total--
}
