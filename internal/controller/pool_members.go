package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// memberKind is what a pool member is good for.
type memberKind int

const (
	// memberStarting: not ready yet (scheduling, starting, gate pending).
	memberStarting memberKind = iota
	// memberReady: running, its gate passed with evidence that proves isolation, its policy in effect and no
	// other policy selecting it. Only these are claimed.
	memberReady
	// memberUnusable: stopped, its gate failed, or found not isolated. It is replaced, never handed out.
	memberUnusable
)

// member is one classified pool pod.
type member struct {
	pod  *corev1.Pod
	kind memberKind
	// stale: made from an older template generation or with another pod spec than the pool makes now.
	stale bool
	// why says what made it unusable.
	why string
	// noPolicy: unusable because its policy was not in the cache, which the API server must confirm.
	noPolicy bool
	// unlinked: its policy does not have the pod among its owners yet (linkPolicies adds it); not ready till then.
	unlinked bool
}

// memberWant is what a member must be to be current and usable.
type memberWant struct {
	generation int64
	hash       string
	// handler is the RuntimeClass handler of the pool's runtime class, which current members run under.
	handler    string
	gateTarget string
	defaults   sandbox.Defaults
	// policy returns the member's policy as the pool would build it.
	policy func(name string) *networkingv1.NetworkPolicy
	// startDeadline, when set, is the creation time before which a member that is still not ready is given up
	// (a start stuck in the runtime, a pod that cannot be scheduled): the pool replaces it.
	startDeadline time.Time
	// attested returns what a running member's PID 1 attested (Attestations.Of).
	attested func(*corev1.Pod) (*attestation.Statement, error)
}

// classifyMember judges a member by its pod, its policy (nil: none, or not the pool's), every policy of its
// namespace and its node, the way a Sandbox's readiness and isolation are judged, and compares it with what the
// pool makes now.
func classifyMember(pod *corev1.Pod, policy *networkingv1.NetworkPolicy, policies []networkingv1.NetworkPolicy, node *corev1.Node, w memberWant) member {
	m := member{pod: pod, kind: memberStarting,
		stale: sandbox.MemberGeneration(pod) != w.generation || pod.Annotations[sandbox.AnnotationMemberHash] != w.hash}
	unusable := func(format string, args ...any) member {
		m.kind, m.why = memberUnusable, fmt.Sprintf(format, args...)
		return m
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return unusable("its pod stopped: %s", stopReason(pod))
	}
	if g := gateState(pod, nil, nil); gateEnded(g.reason) {
		return unusable("%s", g.message)
	}
	running := gatePassed(pod) && pod.Status.Phase == corev1.PodRunning && containerRunning(pod)
	if !running && !w.startDeadline.IsZero() && pod.CreationTimestamp.Time.Before(w.startDeadline) {
		return unusable("not ready in time: %s", podProblem(pod))
	}
	if policy == nil {
		m.noPolicy = true
		return unusable("its NetworkPolicy %s does not exist", pod.Name)
	}
	if !sandbox.PolicyMatches(policy, w.policy(pod.Name)) {
		return unusable("its NetworkPolicy %s was changed by someone else", policy.Name)
	}
	others, err := sandbox.OtherSelectingPolicies(pod.Labels, policy.Name, policies)
	if err != nil {
		return unusable("%v", err)
	}
	if len(others) > 0 {
		return unusable("NetworkPolicies %s also select it and may allow what its own denies", strings.Join(others, ", "))
	}
	if !ownedByPod(policy, pod.Name, pod.UID) {
		m.unlinked = true
		return m
	}
	if !running {
		return m
	}
	st, err := w.attested(pod)
	if errors.Is(err, attestation.ErrMissing) {
		if since := gatePassedAt(pod); !since.IsZero() && time.Since(since) > attestationWait {
			return unusable("its gate passed %s ago, but PID 1 has not attested in its log", time.Since(since).Round(time.Second))
		}
		return m // its log shows the attestation moments after the gate passed
	}
	if err != nil {
		return unusable("its network gate passed, but %v", err)
	}
	ev, err := buildEvidence(pod, node, w.gateTarget, st)
	if err != nil {
		return unusable("its network gate passed but proves nothing: %v", err)
	}
	handler := w.handler
	if m.stale {
		handler = "" // an older member's handler is not known; it is never claimed, only counted for the floor
	}
	if b := runtimeBlocker(handler, ev, w.defaults); b != nil {
		return unusable("%s", b.message)
	}
	m.kind = memberReady
	return m
}
