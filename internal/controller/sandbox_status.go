package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// Reasons of the Sandbox conditions. They are part of the API: clients may switch on them.
const (
	ReasonReady              = "Ready"
	ReasonCreating           = "Creating"
	ReasonStarting           = "Starting"
	ReasonTemplateNotFound   = "TemplateNotFound"
	ReasonRuntimeNotFound    = "RuntimeClassNotFound"
	ReasonInvalid            = "InvalidSpec"
	ReasonPodRejected        = "PodRejected"
	ReasonNameConflict       = "NameConflict"
	ReasonPodFailed          = "PodFailed"
	ReasonPodLost            = "PodLost"
	ReasonNotIsolated        = "NotIsolated"
	ReasonTerminating        = "Terminating"
	ReasonExpired            = "Expired"
	ReasonNotExpired         = "NotExpired"
	ReasonIsolated           = "Isolated"
	ReasonPolicyMissing      = "PolicyMissing"
	ReasonPolicyModified     = "PolicyModified"
	ReasonOtherPolicySelects = "OtherPolicySelects"
	ReasonGatePending        = "GatePending"
	ReasonGateFailed         = "GateFailed"
	// ReasonGateUnproven: the gate passed but its verdict does not prove isolation (no verdict, or a target
	// that is not known to listen).
	ReasonGateUnproven = "GateUnproven"
	// ReasonRuntimeNotIsolating: the RuntimeClass's handler is not an isolating one, or the pod was seen on
	// the node's own kernel, and non-isolating runtimes are not allowed.
	ReasonRuntimeNotIsolating = "RuntimeNotIsolating"
	// ReasonRuntimeMismatch: the pod, seen from inside, is not isolated the way its handler promises.
	ReasonRuntimeMismatch = "RuntimeMismatch"
	// ReasonIsolationUnverified: the pod found nothing that proves the isolation its handler promises (it runs
	// no node's kernel), and the operator does not allow unverified isolation.
	ReasonIsolationUnverified = "IsolationUnverified"
	// ReasonInitMismatch: the pod's airlock-init is missing or of another release than the manager (a
	// template's init: Image whose image does not hold the manager's).
	ReasonInitMismatch = "InitMismatch"
	// ReasonEgressProxyUnavailable: the sandbox has an allowlist and the egress proxy's Service is not there
	// (or not usable); it waits for it.
	ReasonEgressProxyUnavailable = "EgressProxyUnavailable"
	// ReasonIdleTimeout: the sandbox went its idle timeout without activity, before its hard expiry.
	ReasonIdleTimeout = "IdleTimeout"
)

// blocker is a reason the sandbox cannot progress; permanent ones fail it.
type blocker struct {
	reason, message string
	permanent       bool
}

// policyState is what we found of our NetworkPolicy.
type policyState int

const (
	policyMissing policyState = iota
	policyModified
	policyInEffect
)

// observation is everything one reconcile learned; status is a pure function of it.
type observation struct {
	now time.Time
	// expiresAt is the hard expiry; idleExpiresAt the idle deadline (nil without one), from idleTimeout.
	expiresAt     *metav1.Time
	idleExpiresAt *metav1.Time
	idleTimeout   time.Duration
	deleting      bool
	blocked       *blocker
	pod           *corev1.Pod
	podLost       bool
	policy        policyState
	others        []string
	// resolved is set when settings were resolved from the template; status snapshots it with the pod.
	resolved *sandbox.Resolved
	// evidence is what the pod's gate proved, checked against its node, read once; evidenceErr says why it
	// proves nothing.
	evidence    *airlockv1.IsolationEvidence
	evidenceErr error
	// supervisorKey is the key PID 1 attested, recorded with the evidence; attestationPending, that its gate
	// passed but its log does not show the attestation yet.
	supervisorKey      string
	attestationPending bool
	// claim is what the pool claim decided in this pass (sandbox_claim.go).
	claim *claimObs
	// defaults are the operator's settings, for the runtime checks.
	defaults sandbox.Defaults
	// nudgeAt is when the pod's readiness probe is due to be re-triggered, if it has not passed by then
	// (probe_nudge.go).
	nudgeAt *time.Time
}

// computeStatus returns the new status from the old one and what was observed. It sets conditions with
// ObservedGeneration, keeps transition times of unchanged conditions, and derives the phase from them.
func computeStatus(sbx *airlockv1.Sandbox, obs observation) airlockv1.SandboxStatus {
	st := *sbx.Status.DeepCopy()
	st.ObservedGeneration = sbx.Generation
	st.ExpiresAt = obs.expiresAt
	if obs.pod != nil && st.PodName == "" && obs.resolved != nil {
		snapshot(&st, *obs.resolved)
	}
	if obs.claim != nil {
		// A claimed member has run unclaimed for a while: the sandbox's usage starts at the claim.
		st.Pool = obs.claim.status()
		if obs.claim.warm && st.StartedAt == nil {
			st.StartedAt = st.Pool.ClaimedAt.DeepCopy()
		}
	}
	if obs.pod != nil {
		st.PodName = obs.pod.Name
		st.PodIP = obs.pod.Status.PodIP
		st.NodeName = obs.pod.Spec.NodeName
		if st.StartedAt == nil {
			st.StartedAt = containerStartedAt(obs.pod)
		}
	}
	if obs.evidence != nil && st.IsolationEvidence == nil {
		st.IsolationEvidence = obs.evidence.DeepCopy()
		st.SupervisorKey = obs.supervisorKey
	}
	if ev := st.IsolationEvidence; ev != nil {
		if ev.Proven == "" {
			// Recorded by an older manager, from an init container's verdict: its judgement stands.
			ev.Proven = st.Isolation
		}
		st.Isolation = ev.Proven
		if obs.blocked == nil {
			obs.blocked = runtimeBlocker(st.RuntimeHandler, ev, obs.defaults)
		}
	}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = sbx.Generation
		c.LastTransitionTime = metav1.NewTime(obs.now)
		meta.SetStatusCondition(&st.Conditions, c)
	}
	expired := obs.expired()
	isolated := isolationCondition(obs, st.IsolationEvidence)
	set(isolated)
	exp := expiredCondition(obs)
	set(exp)
	ready := readyCondition(obs, exp, isolated)
	set(ready)

	phase := phaseOf(obs, expired, ready)
	if phase != st.Phase {
		st.Usage = &airlockv1.SandboxUsage{SandboxSeconds: sandbox.UsageSeconds(st.StartedAt, obs.now)}
	}
	st.Phase = phase
	return st
}

// snapshot records, with the pod, the settings the sandbox keeps for its life whatever its template does later.
func snapshot(st *airlockv1.SandboxStatus, r sandbox.Resolved) {
	st.Image = r.Image
	st.RuntimeClassName = r.RuntimeClassName
	st.RuntimeHandler = r.RuntimeHandler
	st.Size = r.Size
	st.MaxTimeout = &metav1.Duration{Duration: r.MaxTimeout}
	if r.IdleTimeout > 0 {
		st.IdleTimeout = &metav1.Duration{Duration: r.IdleTimeout}
	}
	st.Network = r.Network.DeepCopy()
}

func phaseOf(obs observation, expired bool, ready metav1.Condition) airlockv1.SandboxPhase {
	switch {
	case obs.deleting:
		return airlockv1.PhaseTerminating
	case expired:
		return airlockv1.PhaseExpired
	case ready.Reason == ReasonPodFailed || ready.Reason == ReasonPodLost || gateEnded(ready.Reason) ||
		(obs.blocked != nil && obs.blocked.permanent):
		return airlockv1.PhaseFailed
	case ready.Status == metav1.ConditionTrue:
		return airlockv1.PhaseReady
	}
	return airlockv1.PhasePending
}

func readyCondition(obs observation, expired, isolated metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: airlockv1.ConditionReady, Status: metav1.ConditionFalse}
	pod := obs.pod
	switch {
	case obs.deleting:
		c.Reason, c.Message = ReasonTerminating, "the sandbox is being deleted"
	case expired.Status == metav1.ConditionTrue && expired.Reason == ReasonIdleTimeout:
		c.Reason, c.Message = ReasonIdleTimeout, "the sandbox expired after "+obs.idleTimeout.String()+" without activity"
	case expired.Status == metav1.ConditionTrue:
		c.Reason, c.Message = ReasonExpired, "the sandbox reached its hard expiry"
	case obs.podLost:
		c.Reason, c.Message = ReasonPodLost, "the sandbox's pod disappeared; its files are gone and it is not replaced"
	case (pod != nil && (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded)) &&
		gateEnded(isolated.Reason):
		// PID 1 ends when its gate fails: that, not the stop it caused, is the cause.
		c.Reason, c.Message = isolated.Reason, isolated.Message
	case pod != nil && pod.Status.Phase == corev1.PodFailed, pod != nil && pod.Status.Phase == corev1.PodSucceeded:
		c.Reason, c.Message = ReasonPodFailed, "the sandbox's pod stopped: "+stopReason(pod)
	case obs.blocked != nil:
		c.Reason, c.Message = obs.blocked.reason, obs.blocked.message
	case pod == nil:
		c.Reason, c.Message = ReasonCreating, "creating the sandbox's pod"
	case pod.Status.Phase != corev1.PodRunning || !containerRunning(pod):
		c.Reason, c.Message = ReasonStarting, "the sandbox's pod is starting"
		if p := podProblem(pod); p != "" {
			c.Message += ": " + p
		}
	case isolated.Status != metav1.ConditionTrue:
		c.Reason, c.Message = ReasonNotIsolated, "the pod runs but its network isolation is not proven: "+isolated.Reason+": "+isolated.Message
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonReady, "the sandbox runs and is isolated"
	}
	return c
}

func isolationCondition(obs observation, ev *airlockv1.IsolationEvidence) metav1.Condition {
	c := metav1.Condition{Type: airlockv1.ConditionNetworkIsolated, Status: metav1.ConditionFalse}
	switch {
	case obs.policy == policyMissing:
		c.Reason, c.Message = ReasonPolicyMissing, "the sandbox's NetworkPolicy does not exist yet"
	case obs.policy == policyModified:
		c.Reason, c.Message = ReasonPolicyModified, "the sandbox's NetworkPolicy was changed by someone else; restoring it"
	case len(obs.others) > 0:
		c.Reason = ReasonOtherPolicySelects
		c.Message = fmt.Sprintf("NetworkPolicies are additive and %s also select(s) this sandbox's pod, so traffic our policy denies may be allowed",
			strings.Join(obs.others, ", "))
	default:
		gate := gateState(obs.pod, ev, obs.evidenceErr)
		c.Reason, c.Message = gate.reason, gate.message
		if gate.passed {
			c.Status = metav1.ConditionTrue
		}
	}
	return c
}

type gate struct {
	passed          bool
	reason, message string
}

// gateState reads the pod's gate: PID 1 serves commands, and answers the readiness probe, only once it proved
// the runtime's isolation and saw its target blocked from inside the pod; that counts only with evidence that
// the target is known to listen. Once recorded, the evidence stands: the gate runs once, before any command.
func gateState(pod *corev1.Pod, ev *airlockv1.IsolationEvidence, evidenceErr error) gate {
	switch {
	case ev != nil && ev.ProxyTarget != "":
		return gate{passed: true, reason: ReasonIsolated, message: fmt.Sprintf(
			"the NetworkPolicy is in effect: from inside the pod, %s (known to listen) was blocked and the egress proxy %s was reached before any command ran",
			ev.GateTarget, ev.ProxyTarget)}
	case ev != nil:
		return gate{passed: true, reason: ReasonIsolated, message: fmt.Sprintf(
			"the NetworkPolicy is in effect: from inside the pod, %s (known to listen) was blocked before any command ran", ev.GateTarget)}
	case pod == nil:
		return gate{reason: ReasonGatePending, message: "waiting for the pod's network gate"}
	}
	if msg, failed := gateFailure(pod); failed {
		if isRuntimeMismatch(msg) {
			return gate{reason: ReasonRuntimeMismatch, message: "the pod's runtime is not the isolation its RuntimeClass promises: " + msg}
		}
		if isInitMismatch(msg) {
			return gate{reason: ReasonInitMismatch, message: "the pod's airlock-init is not the manager's: " + msg}
		}
		return gate{reason: ReasonGateFailed, message: "the pod's network gate failed: " + msg}
	}
	if evidenceErr != nil {
		return gate{reason: ReasonGateUnproven, message: "the pod's network gate passed but proves nothing: " + evidenceErr.Error()}
	}
	return gate{reason: ReasonGatePending, message: "waiting for the pod's network gate"}
}

// gateEnded tells the gate reasons that end PID 1, and so the pod, for good.
func gateEnded(reason string) bool {
	return reason == ReasonGateFailed || reason == ReasonRuntimeMismatch || reason == ReasonInitMismatch
}

func containerRunning(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == sandbox.ContainerName {
			return s.State.Running != nil
		}
	}
	return false
}

func containerStartedAt(pod *corev1.Pod) *metav1.Time {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == sandbox.ContainerName && s.State.Running != nil {
			t := s.State.Running.StartedAt
			return &t
		}
	}
	return nil
}

// podProblem describes why a pod is not running. The pod's own reason comes first: when the kubelet evicts a pod
// or its node is lost, that names the cause (Evicted: Usage of EmptyDir volume ...), while the containers it
// stopped only say how they ended.
func podProblem(pod *corev1.Pod) string {
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		return reasonMessage(pod.Status.Reason, pod.Status.Message)
	}
	// The init container that copies airlock-init in (where image volumes are not available) comes first.
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, s := range statuses {
		switch {
		case s.State.Waiting != nil && s.State.Waiting.Reason != "" && s.State.Waiting.Reason != "PodInitializing" && s.State.Waiting.Reason != "ContainerCreating":
			return fmt.Sprintf("container %s: %s: %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
			return fmt.Sprintf("container %s exited %d (%s) %s", s.Name, s.State.Terminated.ExitCode,
				s.State.Terminated.Reason, strings.TrimSpace(s.State.Terminated.Message))
		}
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			return reasonMessage(c.Reason, c.Message)
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "":
			return "not scheduled: " + c.Message
		}
	}
	return ""
}

// stopReason says why a pod stopped, never empty: a sandbox that failed with no reason leaves its user nothing
// to act on.
func stopReason(pod *corev1.Pod) string {
	if p := podProblem(pod); p != "" {
		return p
	}
	for _, s := range pod.Status.ContainerStatuses {
		if t := s.State.Terminated; s.Name == sandbox.ContainerName && t != nil {
			return strings.TrimSpace(fmt.Sprintf("container %s exited %d (%s) %s", s.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		}
	}
	return fmt.Sprintf("phase %s with no reason given by the kubelet", pod.Status.Phase)
}

func reasonMessage(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + strings.TrimSpace(message)
}
