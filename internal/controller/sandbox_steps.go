package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// ensureFinalizer adds the cleanup finalizer before anything is created, so nothing can outlive the Sandbox.
func (r *SandboxReconciler) ensureFinalizer(ctx context.Context, sbx *airlockv1.Sandbox) (bool, error) {
	if controllerutil.ContainsFinalizer(sbx, Finalizer) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(sbx.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(sbx, Finalizer)
	if err := r.Patch(ctx, sbx, patch); err != nil {
		return true, fmt.Errorf("adding finalizer: %w", err)
	}
	r.written.record(client.ObjectKeyFromObject(sbx), sbx.ResourceVersion)
	return false, nil
}

// resolve works out the sandbox's settings. Before the pod exists they come from the template and defaults;
// afterwards from the snapshot in status, so editing a template never changes a running sandbox. Problems the
// user can fix are recorded as obs.blocked; the returned Resolved then still carries usable timeouts.
func (r *SandboxReconciler) resolve(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) (sandbox.Resolved, error) {
	if sbx.Status.PodName != "" {
		return fromSnapshot(sbx), nil
	}
	fallback, _ := sandbox.Resolve(&airlockv1.Sandbox{Spec: airlockv1.SandboxSpec{Image: "-", Timeout: sbx.Spec.Timeout}}, nil, r.Defaults)

	var tmpl *airlockv1.SandboxTemplate
	if ref := sbx.Spec.TemplateRef; ref != nil {
		tmpl = &airlockv1.SandboxTemplate{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: ref.Name}, tmpl); err != nil {
			if !apierrors.IsNotFound(err) {
				return fallback, fmt.Errorf("getting template %s: %w", ref.Name, err)
			}
			obs.blocked = &blocker{reason: ReasonTemplateNotFound,
				message: fmt.Sprintf("SandboxTemplate %q does not exist in namespace %s", ref.Name, sbx.Namespace)}
			return fallback, nil
		}
	}
	res, err := sandbox.Resolve(sbx, tmpl, r.Defaults)
	if err != nil {
		obs.blocked = &blocker{reason: ReasonInvalid, message: err.Error()}
		return fallback, nil
	}
	rc := &nodev1.RuntimeClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: res.RuntimeClassName}, rc); err != nil {
		if !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("getting runtime class %s: %w", res.RuntimeClassName, err)
		}
		obs.blocked = &blocker{reason: ReasonRuntimeNotFound,
			message: fmt.Sprintf("RuntimeClass %q does not exist: install it (the Helm chart creates gvisor) or pick another runtime", res.RuntimeClassName)}
	} else {
		res.RuntimeHandler = rc.Handler
		// Not permanent: the template, the RuntimeClass (by re-creation) or the operator's flags may change,
		// and the watches on templates and runtime classes retry.
		switch err := r.Defaults.CheckRuntime(res, rc.Handler); {
		case errors.Is(err, sandbox.ErrNotIsolating):
			obs.blocked = &blocker{reason: ReasonRuntimeNotIsolating, message: err.Error()}
		case err != nil:
			obs.blocked = &blocker{reason: ReasonInvalid, message: err.Error()}
		}
	}
	obs.resolved = &res
	return res, nil
}

// fromSnapshot rebuilds the settings that still matter after the pod exists from what status recorded.
func fromSnapshot(sbx *airlockv1.Sandbox) sandbox.Resolved {
	res := sandbox.Resolved{
		Image:            sbx.Status.Image,
		RuntimeClassName: sbx.Status.RuntimeClassName,
		Size:             sbx.Status.Size,
		Network:          airlockv1.NetworkSpec{Mode: airlockv1.NetworkNone},
	}
	if sbx.Status.Network != nil {
		res.Network = *sbx.Status.Network.DeepCopy()
	}
	if sbx.Status.MaxTimeout != nil {
		res.MaxTimeout = sbx.Status.MaxTimeout.Duration
	}
	if sbx.Status.IdleTimeout != nil {
		res.IdleTimeout = sbx.Status.IdleTimeout.Duration
	}
	return res
}

// locateEgressProxy finds the egress proxy for a network with an allowlist; without one the sandbox waits,
// since its policy and its HTTP_PROXY both need the proxy.
func (r *SandboxReconciler) locateEgressProxy(ctx context.Context, res *sandbox.Resolved, obs *observation) error {
	if obs.blocked != nil || !sandbox.NeedsProxy(res.Network) {
		return nil
	}
	if r.EgressProxy == nil {
		obs.blocked = &blocker{reason: ReasonEgressProxyUnavailable,
			message: "network.allow needs Airlock's egress proxy, and the manager has none configured (--egress-proxy-service)"}
		return nil
	}
	p, err := r.EgressProxy.Locate(ctx, obs.now)
	if err != nil {
		if apierrors.IsNotFound(err) || errors.Is(err, errProxyUnusable) {
			obs.blocked = &blocker{reason: ReasonEgressProxyUnavailable, message: err.Error() + " (is the egress proxy installed?)"}
			return nil
		}
		return err
	}
	res.EgressProxy = p
	if obs.resolved != nil {
		obs.resolved.EgressProxy = p
	}
	return nil
}

// computeExpiry fixes the absolute hard expiry the first time and moves it only when spec.timeout grows, and
// computes the idle deadline from status.lastActivityAt.
func (r *SandboxReconciler) computeExpiry(sbx *airlockv1.Sandbox, res sandbox.Resolved, obs *observation) {
	maxTimeout := res.MaxTimeout
	if sbx.Status.MaxTimeout != nil {
		maxTimeout = sbx.Status.MaxTimeout.Duration
	}
	at := sandbox.ExpiresAt(sbx.CreationTimestamp.Time, res.Timeout, sbx.Spec.Timeout, maxTimeout, sbx.Status.ExpiresAt)
	obs.expiresAt = &metav1.Time{Time: at}
	obs.idleTimeout = res.IdleTimeout
	obs.idleExpiresAt = idleDeadline(&sbx.Status, res.IdleTimeout)
}

// expire marks the sandbox Expired, then deletes it; the finalizer does the cleanup.
func (r *SandboxReconciler) expire(ctx context.Context, sbx *airlockv1.Sandbox, before *airlockv1.SandboxStatus, obs observation) error {
	if err := r.writeStatus(ctx, sbx, before, obs); err != nil {
		return err
	}
	uid := sbx.UID
	if err := r.Delete(ctx, sbx, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting expired sandbox: %w", err)
	}
	return nil
}

// ensurePolicy applies the deny-all policy before the pod exists, and restores it if anyone changed it.
func (r *SandboxReconciler) ensurePolicy(ctx context.Context, sbx *airlockv1.Sandbox, res sandbox.Resolved, obs *observation) error {
	want := sandbox.BuildNetworkPolicy(sbx, res.Network, res.EgressProxy)
	m := claimedMember(sbx, obs)
	var memberUID types.UID
	if m != "" {
		want = sandbox.ClaimedPolicy(sbx, m, res.Network, res.EgressProxy)
		uid, err := r.podUID(ctx, sbx.Namespace, m, obs)
		if err != nil {
			return err
		}
		memberUID = uid
	}
	existing := &networkingv1.NetworkPolicy{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), existing)
	// A claimed member keeps its own policy, owned by its pod (and its pool, until that is deleted).
	members := err == nil && m != "" && ownedByPod(existing, m, memberUID)
	switch {
	case err == nil && !metav1.IsControlledBy(existing, sbx) && !members:
		obs.blocked = &blocker{reason: ReasonNameConflict, permanent: true,
			message: fmt.Sprintf("a NetworkPolicy named %q exists and does not belong to this sandbox", want.Name)}
		return nil
	case err == nil && sandbox.PolicyMatches(existing, want):
		obs.policy = policyInEffect
		return nil
	case err == nil:
		obs.policy = policyModified
	case apierrors.IsNotFound(err):
		obs.policy = policyInEffect
		if sbx.Status.PodName != "" {
			obs.policy = policyMissing // the pod ran without it for a moment
		}
	default:
		return fmt.Errorf("getting network policy: %w", err)
	}
	if members {
		// Only its rules are ours to restore: its labels and owners stay the member's.
		want.Labels = nil
	} else if err := controllerutil.SetControllerReference(sbx, want, r.Scheme); err != nil {
		return fmt.Errorf("owning network policy: %w", err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return fmt.Errorf("converting network policy: %w", err)
	}
	// Empty rule lists are omitted when serialised; set them explicitly so that our apply owns them and
	// replaces any rule someone else added.
	spec, ok := u["spec"].(map[string]any)
	if !ok {
		return fmt.Errorf("converting network policy: no spec in %v", u)
	}
	for _, f := range []string{"ingress", "egress"} {
		if _, ok := spec[f]; !ok {
			spec[f] = []any{}
		}
	}
	ac := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	if err := r.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		b, nerr := notTenant(ctx, r.Client, err, sbx.Namespace, policyWrite)
		if b == nil && nerr == nil {
			return fmt.Errorf("applying network policy: %w", err)
		}
		obs.blocked, obs.policy = b, policyMissing
		return nerr
	}
	return nil
}

// podUID is the UID of the sandbox's pod named name: the one claimed in this pass, or the cached one; "" when it
// is gone (ensurePod then finds it lost).
func (r *SandboxReconciler) podUID(ctx context.Context, namespace, name string, obs *observation) (types.UID, error) {
	if obs.pod != nil && obs.pod.Name == name {
		return obs.pod.UID, nil
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return pod.UID, nil
}

// ownedByPod tells whether np has the pod named name (of this UID, unless uid is "") among its owners: a pool
// member's policy, which the member keeps when it is claimed.
func ownedByPod(np *networkingv1.NetworkPolicy, name string, uid types.UID) bool {
	for _, ref := range np.OwnerReferences {
		if ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == name && (uid == "" || ref.UID == uid) {
			return true
		}
	}
	return false
}

// ensurePod creates the pod once. A pod that existed and is gone fails the sandbox: a fresh pod would silently
// lose the agent's files.
func (r *SandboxReconciler) ensurePod(ctx context.Context, sbx *airlockv1.Sandbox, res sandbox.Resolved, obs *observation) error {
	if obs.pod != nil {
		return nil // a pool member claimed in this pass
	}
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: sbx.Namespace, Name: podNameOf(sbx)}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) && sbx.Status.PodName != "" {
		// The cache may lag; only the API server may declare the pod lost.
		err = r.APIReader.Get(ctx, key, pod)
		if apierrors.IsNotFound(err) {
			obs.podLost = true
			return nil
		}
	}
	switch {
	case err == nil && !metav1.IsControlledBy(pod, sbx):
		obs.blocked = &blocker{reason: ReasonNameConflict, permanent: true,
			message: fmt.Sprintf("a pod named %q exists and does not belong to this sandbox", pod.Name)}
		return nil
	case err == nil:
		obs.pod = pod
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("getting pod: %w", err)
	}

	opts, err := gatedPodOptions(ctx, r.Client, r.Pod, r.Defaults, res.RuntimeHandler)
	if err != nil {
		return err
	}
	pod = sandbox.BuildPod(sbx, res, opts)
	if err := controllerutil.SetControllerReference(sbx, pod, r.Scheme); err != nil {
		return fmt.Errorf("owning pod: %w", err)
	}
	if err := r.Create(ctx, pod); err != nil {
		switch {
		case apierrors.IsAlreadyExists(err):
			return nil // the cache had not seen it yet; its watch event brings us back
		case apierrors.IsInvalid(err):
			obs.blocked = &blocker{reason: ReasonPodRejected, permanent: true, message: "the API server rejected the pod: " + err.Error()}
			return nil
		case apierrors.IsForbidden(err):
			b, nerr := notTenant(ctx, r.Client, err, sbx.Namespace, podWrite)
			if b == nil {
				b = &blocker{reason: ReasonPodRejected, message: "the API server refused the pod (retrying): " + err.Error()}
			}
			obs.blocked = b
			return nerr
		}
		return fmt.Errorf("creating pod: %w", err)
	}
	obs.pod = pod
	return nil
}

// observeIsolation finds other policies that select the pod: any of them may re-open what ours denies.
func (r *SandboxReconciler) observeIsolation(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) error {
	if obs.pod == nil {
		return nil
	}
	// Only policies that require this sandbox's name or no name can select its pod (indexPolicySelects): two
	// small lists instead of every policy in the namespace, on every reconcile. Read-only, so not copied.
	var candidates []networkingv1.NetworkPolicy
	for _, key := range []string{obs.pod.Labels[sandbox.LabelName], sandbox.AnyName} {
		var policies networkingv1.NetworkPolicyList
		if err := r.List(ctx, &policies, client.InNamespace(sbx.Namespace), client.MatchingFields{indexPolicySelects: key},
			client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing network policies: %w", err)
		}
		candidates = append(candidates, policies.Items...)
	}
	others, err := sandbox.OtherSelectingPolicies(obs.pod.Labels, obs.pod.Name, candidates)
	if err != nil {
		return err
	}
	obs.others = others
	return nil
}

// observeRuntime reads, once, what the pod's PID 1 attested once its gate passed (the pod's readiness probe),
// and checks it against the node the pod runs on: the evidence for NetworkIsolated and status.isolation, and the
// key the gateway pins. Once recorded in status it is not read again: the gate runs once, before any command.
func (r *SandboxReconciler) observeRuntime(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) error {
	if obs.pod == nil || sbx.Status.IsolationEvidence != nil {
		return nil
	}
	if !gatePassed(obs.pod) {
		return nil
	}
	var node *corev1.Node
	if name := obs.pod.Spec.NodeName; name != "" {
		node = &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("getting node %s: %w", name, err)
			}
			node = nil
		}
	}
	st, err := r.Attestations.Of(ctx, obs.pod)
	switch {
	case errors.Is(err, attestation.ErrMissing):
		// The kubelet writes the log out moments after PID 1 wrote it: look again soon, for a while.
		if since := gatePassedAt(obs.pod); !since.IsZero() && obs.now.Sub(since) > attestationWait {
			obs.evidenceErr = fmt.Errorf("its gate passed %s ago, but PID 1 has not attested in its log (is its airlock-init of the manager's release?)",
				obs.now.Sub(since).Round(time.Second))
			return nil
		}
		obs.attestationPending = true
		return nil
	case err != nil:
		obs.evidenceErr = err
		return nil
	}
	obs.evidence, obs.evidenceErr = buildEvidence(obs.pod, node, r.Pod.GateTarget, st)
	if obs.evidenceErr == nil {
		obs.supervisorKey = st.Key
	}
	return nil
}

// recordTransitions emits events and metrics for what changed; called only after the status write succeeded.
func (r *SandboxReconciler) recordTransitions(sbx *airlockv1.Sandbox, before *airlockv1.SandboxStatus, now time.Time) {
	after := &sbx.Status
	if before.Phase != after.Phase {
		switch after.Phase {
		case airlockv1.PhaseReady:
			took := now.Sub(sbx.CreationTimestamp.Time)
			r.Metrics.ObserveReady(took)
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Ready", "Start",
				"ready %.1fs after creation under runtime class %s (isolation %s)", took.Seconds(), after.RuntimeClassName, after.Isolation)
		case airlockv1.PhaseFailed:
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "Failed", "Fail", "%s", readyMessage(after))
		case airlockv1.PhaseExpired:
			if c := meta.FindStatusCondition(after.Conditions, airlockv1.ConditionExpired); c != nil && c.Reason == ReasonIdleTimeout {
				r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, ReasonIdleTimeout, "Expire", "%s; deleting", c.Message)
				break
			}
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Expired", "Expire",
				"reached its hard expiry %s; deleting", after.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	if wasTrue(before, airlockv1.ConditionNetworkIsolated) && !wasTrue(after, airlockv1.ConditionNetworkIsolated) && sbx.DeletionTimestamp.IsZero() {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "IsolationLost", "Isolate", "%s", conditionMessage(after, airlockv1.ConditionNetworkIsolated))
	}
}

func wasTrue(st *airlockv1.SandboxStatus, condType string) bool {
	return meta.IsStatusConditionTrue(st.Conditions, condType)
}

func conditionMessage(st *airlockv1.SandboxStatus, condType string) string {
	if c := meta.FindStatusCondition(st.Conditions, condType); c != nil {
		return c.Reason + ": " + c.Message
	}
	return ""
}

func readyMessage(st *airlockv1.SandboxStatus) string {
	return conditionMessage(st, airlockv1.ConditionReady)
}
