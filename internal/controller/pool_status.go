package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// Reasons of the SandboxPool conditions.
const (
	ReasonPoolFull     = "Full"
	ReasonPoolFilling  = "Filling"
	ReasonPoolEmpty    = "NoReadyMember"
	ReasonPoolHasReady = "ReadyMembers"
	ReasonPoolNoDemand = "NoMembersWanted"
)

// computePoolStatus returns the pool's status from what was observed, with ObservedGeneration on every condition
// and transition times kept for unchanged ones.
func computePoolStatus(pool *airlockv1.SandboxPool, obs poolObservation) airlockv1.SandboxPoolStatus {
	st := *pool.Status.DeepCopy()
	st.ObservedGeneration = pool.Generation
	st.Desired = desired(pool, obs.demand)
	st.RecentClaims = obs.demand
	st.Members, st.ReadyMembers, st.StaleMembers = 0, 0, 0
	var held heldMembers
	for _, m := range obs.members {
		if m.kind == memberUnusable {
			continue // deleted in this pass
		}
		st.Members++
		switch {
		case m.stale:
			st.StaleMembers++
		case m.kind == memberReady:
			st.ReadyMembers++
		case m.kind == memberStarting:
			held.add(m.pod)
		}
	}
	if obs.resolved != nil {
		st.TemplateGeneration = obs.want.generation
	}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = pool.Generation
		c.LastTransitionTime = metav1.NewTime(obs.now)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(poolReadyCondition(st, obs.blocked, held))
	set(poolDrainedCondition(st))
	return st
}

// heldMembers are the starting members whose pods report a problem (unschedulable, an image that cannot be
// pulled, a waiting container): a pool that stays short of its replicas says why. One pod, the first by name,
// is quoted, so that the message does not change from pass to pass.
type heldMembers struct {
	count         int
	name, problem string
}

func (h *heldMembers) add(pod *corev1.Pod) {
	p := podProblem(pod)
	if p == "" {
		return
	}
	h.count++
	if h.name == "" || pod.Name < h.name {
		h.name, h.problem = pod.Name, p
	}
}

func poolReadyCondition(st airlockv1.SandboxPoolStatus, blocked *blocker, held heldMembers) metav1.Condition {
	c := metav1.Condition{Type: airlockv1.PoolConditionReady, Status: metav1.ConditionFalse}
	switch {
	case blocked != nil:
		c.Reason, c.Message = blocked.reason, blocked.message
	case st.ReadyMembers >= st.Desired:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonPoolFull
		c.Message = fmt.Sprintf("%d of %d members ready (template generation %d)", st.ReadyMembers, st.Desired, st.TemplateGeneration)
	default:
		c.Reason = ReasonPoolFilling
		c.Message = fmt.Sprintf("%d of %d members ready (template generation %d), %d of an older generation being replaced",
			st.ReadyMembers, st.Desired, st.TemplateGeneration, st.StaleMembers)
		if held.count > 0 {
			c.Message += fmt.Sprintf("; %d starting members are held up, e.g. pod %s: %s", held.count, held.name, held.problem)
		}
	}
	return c
}

// poolDrainedCondition is True while no current member is ready: claims then fall back to a cold create.
func poolDrainedCondition(st airlockv1.SandboxPoolStatus) metav1.Condition {
	c := metav1.Condition{Type: airlockv1.PoolConditionDrained, Status: metav1.ConditionFalse, Reason: ReasonPoolHasReady,
		Message: fmt.Sprintf("%d members ready to claim", st.ReadyMembers)}
	switch {
	case st.ReadyMembers > 0:
	case st.Desired == 0:
		c.Reason, c.Message = ReasonPoolNoDemand, "the pool keeps no members: claims create their pods cold"
		c.Status = metav1.ConditionTrue
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonPoolEmpty
		c.Message = "no member of the current template generation is ready: claims create their pods cold until the pool refills"
	}
	return c
}

// recordPoolTransitions emits an event when the pool drains or refills; called after the status write.
func (r *PoolReconciler) recordPoolTransitions(pool *airlockv1.SandboxPool, before *airlockv1.SandboxPoolStatus) {
	was := meta.IsStatusConditionTrue(before.Conditions, airlockv1.PoolConditionDrained)
	is := meta.IsStatusConditionTrue(pool.Status.Conditions, airlockv1.PoolConditionDrained)
	switch {
	case is && !was && pool.Status.Desired > 0:
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, "Drained", "Claim", "no ready member: claims fall back to cold creates")
	case was && !is:
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "Refilled", "Refill", "%d members ready", pool.Status.ReadyMembers)
	}
}
