package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/sandbox"
)

// poolObservation is everything one pool reconcile learned; the pool's status is a pure function of it.
type poolObservation struct {
	now time.Time
	// blocked says why no member can be made now (no template, a bad runtime, a refused pod).
	blocked *blocker
	// resolved are the members' settings, want what a current, usable member is.
	resolved *sandbox.Resolved
	opts     sandbox.PodOptions
	want     memberWant
	// members are the pool's unclaimed pods, not being deleted.
	members []member
	// podNames are every cached sandbox pod's name in the namespace, claimed or not: a policy named after one
	// of them is not an orphan.
	podNames map[string]bool
	// memberPolicies are the pool's own policies, by name.
	memberPolicies map[string]*networkingv1.NetworkPolicy
	// demand counts the Sandboxes that named the pool within demandWindow; oldestClaim is the first of them.
	demand                   int32
	oldestClaim, newestClaim *time.Time
	// pendingClaims counts the pool's sandboxes whose claim is not decided yet (claimPending).
	pendingClaims int
	// replaced and retired count the members removed in this pass.
	replaced, retired int
	// orphanWait is how long until a young orphaned policy may be removed, startWait until the first starting
	// member runs out of time; 0 when none waits.
	orphanWait, startWait time.Duration
	// refillWait is how long until the pool refills after a burst of claims; 0 when it need not wait.
	refillWait time.Duration
	// nudgeWait is how long until a starting member's readiness probe is due to be re-triggered (probe_nudge.go).
	nudgeWait time.Duration
}

// memberStartTimeout is how long a member may take from creation to ready before it is replaced.
func memberStartTimeout(o sandbox.PodOptions) time.Duration {
	return o.GateTimeout.Duration + memberStartSlack
}

// resolveMember works out the members' settings from the template as a Sandbox naming it would get them.
func (r *PoolReconciler) resolveMember(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	tmpl := &airlockv1.SandboxTemplate{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: pool.Spec.TemplateRef.Name}, tmpl); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting template %s: %w", pool.Spec.TemplateRef.Name, err)
		}
		obs.blocked = &blocker{reason: ReasonTemplateNotFound,
			message: fmt.Sprintf("SandboxTemplate %q does not exist in namespace %s", pool.Spec.TemplateRef.Name, pool.Namespace)}
		return nil
	}
	res, err := sandbox.Resolve(sandbox.PoolSandbox(pool, pool.Name), tmpl, r.Defaults)
	if err != nil {
		obs.blocked = &blocker{reason: ReasonInvalid, message: err.Error()}
		return nil
	}
	rc := &nodev1.RuntimeClass{}
	if err := r.Get(ctx, client.ObjectKey{Name: res.RuntimeClassName}, rc); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting runtime class %s: %w", res.RuntimeClassName, err)
		}
		obs.blocked = &blocker{reason: ReasonRuntimeNotFound, message: fmt.Sprintf("RuntimeClass %q does not exist", res.RuntimeClassName)}
		return nil
	}
	res.RuntimeHandler = rc.Handler
	if err := r.Defaults.CheckRuntime(res, rc.Handler); err != nil {
		obs.blocked = &blocker{reason: ReasonRuntimeNotIsolating, message: err.Error()}
		return nil
	}
	if sandbox.NeedsProxy(res.Network) {
		if r.EgressProxy == nil {
			obs.blocked = &blocker{reason: ReasonEgressProxyUnavailable, message: "network.allow needs Airlock's egress proxy, and the manager has none configured"}
			return nil
		}
		p, err := r.EgressProxy.Locate(ctx, obs.now)
		if err != nil {
			obs.blocked = &blocker{reason: ReasonEgressProxyUnavailable, message: err.Error()}
			return nil
		}
		res.EgressProxy = p
	}
	opts, err := gatedPodOptions(ctx, r.Client, r.Pod, r.Defaults, rc.Handler)
	if err != nil {
		return err
	}
	obs.resolved, obs.opts = &res, opts
	obs.want = memberWant{generation: tmpl.Generation, hash: sandbox.MemberHash(res, opts), handler: rc.Handler,
		gateTarget: r.Pod.GateTarget, defaults: r.Defaults, startDeadline: obs.now.Add(-memberStartTimeout(r.Pod)),
		policy:   func(name string) *networkingv1.NetworkPolicy { return sandbox.BuildMemberPolicy(pool, name, res) },
		attested: func(pod *corev1.Pod) (*attestation.Statement, error) { return r.Attestations.Of(ctx, pod) }}
	return nil
}

// gatedPodOptions are the pod options for a pod under this RuntimeClass handler, as the Sandbox reconciler and
// the pool build pods (a member and a Sandbox's own pod must come out the same): the gate port the Nodes report
// for their kubelet, the isolation the handler promises, for a VM the nodes' kernels, none of which the pod's
// may be, and how airlock-init reaches the pod (an image volume where the cluster offers them, else a copy).
func gatedPodOptions(ctx context.Context, c client.Reader, o sandbox.PodOptions, d sandbox.Defaults, handler string) (sandbox.PodOptions, error) {
	o.Isolation = d.ExpectedIsolation(handler)
	o.CopyInit = o.InitDelivery == sandbox.InitDeliveryCopy
	if o.GateTarget != "" && o.Isolation != airlockv1.IsolationKata && o.InitDelivery != sandbox.InitDeliveryAuto {
		return o, nil
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return o, fmt.Errorf("listing nodes for the kubelet port and kernels: %w", err)
	}
	o.HostKernels = nil
	ports := map[int32]int{}
	for i := range nodes.Items {
		st := &nodes.Items[i].Status
		if p := st.DaemonEndpoints.KubeletEndpoint.Port; p != 0 {
			ports[p]++
		}
		if k := st.NodeInfo.KernelVersion; o.Isolation == airlockv1.IsolationKata && k != "" && !slices.Contains(o.HostKernels, k) {
			o.HostKernels = append(o.HostKernels, k)
		}
	}
	if o.GateTarget == "" && len(ports) > 0 {
		o.GatePort = commonestPort(ports)
	}
	if o.InitDelivery == sandbox.InitDeliveryAuto {
		o.CopyInit = sandbox.ImageVolumesUnavailable(o.ServerVersion, nodes.Items) != ""
	}
	slices.Sort(o.HostKernels)
	return o, nil
}

// commonestPort is the kubelet port most nodes report, the lowest of a tie: the same whatever order the cache
// lists the nodes in, so that pods (and pool members' spec hashes) do not change from one pass to the next.
func commonestPort(ports map[int32]int) int32 {
	var best int32
	for p, n := range ports {
		if n > ports[best] || (n == ports[best] && p < best) {
			best = p
		}
	}
	return best
}

// observeMembers lists and classifies the pool's unclaimed members.
func (r *PoolReconciler) observeMembers(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pool.Namespace)); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	var policies networkingv1.NetworkPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(pool.Namespace)); err != nil {
		return fmt.Errorf("listing network policies: %w", err)
	}
	obs.podNames = map[string]bool{}
	obs.memberPolicies = map[string]*networkingv1.NetworkPolicy{}
	for i := range policies.Items {
		if p := &policies.Items[i]; p.Labels[sandbox.LabelPool] == pool.Name && metav1.IsControlledBy(p, pool) {
			obs.memberPolicies[p.Name] = p
		}
	}
	nodes := map[string]*corev1.Node{}
	for _, name := range r.created.unseen(client.ObjectKeyFromObject(pool), pods.Items, obs.now) {
		// Created by an earlier pass, not in the cache yet: it counts, or the pool would make it again.
		obs.members = append(obs.members, member{kind: memberStarting})
		obs.podNames[name] = true
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		obs.podNames[pod.Name] = true
		if pod.Labels[sandbox.LabelPool] != pool.Name || !metav1.IsControlledBy(pod, pool) || pod.DeletionTimestamp != nil {
			continue
		}
		if obs.resolved == nil {
			obs.members = append(obs.members, member{pod: pod, kind: memberStarting, stale: true})
			continue
		}
		node, err := r.nodeOf(ctx, pod, nodes)
		if err != nil {
			return err
		}
		m := classifyMember(pod, obs.memberPolicies[pod.Name], policies.Items, node, obs.want)
		if m.kind == memberStarting {
			if wait := pod.CreationTimestamp.Sub(obs.want.startDeadline); obs.startWait == 0 || wait < obs.startWait {
				obs.startWait = max(wait, time.Second)
			}
		}
		obs.members = append(obs.members, m)
	}
	return nil
}

func (r *PoolReconciler) nodeOf(ctx context.Context, pod *corev1.Pod, seen map[string]*corev1.Node) (*corev1.Node, error) {
	name := pod.Spec.NodeName
	if name == "" {
		return nil, nil
	}
	if n, ok := seen[name]; ok {
		return n, nil
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting node %s: %w", name, err)
		}
		n = nil
	}
	seen[name] = n
	return n, nil
}

// observeDemand counts the Sandboxes that named the pool within the demand window.
func (r *PoolReconciler) observeDemand(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	var list airlockv1.SandboxList
	if err := r.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingFields{indexSandboxPool: pool.Name}); err != nil {
		return fmt.Errorf("listing sandboxes of the pool: %w", err)
	}
	for i := range list.Items {
		sbx := &list.Items[i]
		at := sbx.CreationTimestamp.Time
		if obs.now.Sub(at) >= demandWindow {
			continue
		}
		if claimPending(sbx, obs.now) {
			obs.pendingClaims++
		}
		obs.demand++
		if obs.oldestClaim == nil || at.Before(*obs.oldestClaim) {
			obs.oldestClaim = &at
		}
		if obs.newestClaim == nil || at.After(*obs.newestClaim) {
			obs.newestClaim = &at
		}
	}
	return nil
}

// claimPending tells a recent sandbox of the pool whose claim is not decided yet: neither warm nor cold, nor
// waiting for a member (whenDrained: Wait), nor being deleted. One that stays undecided for pendingClaimWindow
// (its reconcile keeps failing) no longer counts, so that it cannot hold the pool's refill for ever.
func claimPending(sbx *airlockv1.Sandbox, now time.Time) bool {
	if sbx.Status.Pool != nil || sbx.Status.PodName != "" || sbx.DeletionTimestamp != nil || now.Sub(sbx.CreationTimestamp.Time) >= pendingClaimWindow {
		return false
	}
	c := meta.FindStatusCondition(sbx.Status.Conditions, airlockv1.ConditionReady)
	return c == nil || c.Reason != ReasonWaitingForMember
}

// desired is how many ready members the pool aims for: replicas, or the recent demand up to maxReplicas.
func desired(pool *airlockv1.SandboxPool, demand int32) int32 {
	d := pool.Spec.Replicas
	if m := pool.Spec.MaxReplicas; m != nil {
		d = min(max(d, demand), *m)
	}
	return d
}

// removeUnusable deletes members that stopped or are not isolated; createMembers then replaces them.
func (r *PoolReconciler) removeUnusable(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	for i := range obs.members {
		m := &obs.members[i]
		if m.kind != memberUnusable {
			continue
		}
		if m.noPolicy {
			// Policy and pod come through separate watches: a new member's pod may be seen before its policy.
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m.pod), &networkingv1.NetworkPolicy{})
			if err == nil {
				m.kind = memberStarting
				continue
			}
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("getting member policy %s: %w", m.pod.Name, err)
			}
		}
		if err := r.deleteMember(ctx, m.pod); err != nil {
			return err
		}
		obs.replaced++
		r.Recorder.Eventf(pool, m.pod, corev1.EventTypeWarning, "MemberReplaced", "Replace", "pool member %s is replaced: %s", m.pod.Name, m.why)
	}
	return nil
}

// createMembers starts the current members that are missing: the policy first, then the pod, so the pod never
// runs without it.
func (r *PoolReconciler) createMembers(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	var current, starting int32
	for _, m := range obs.members {
		if !m.stale && m.kind != memberUnusable {
			current++
		}
		if m.kind == memberStarting {
			starting++
		}
	}
	need := min(desired(pool, obs.demand)-current, maxStarting-starting)
	if obs.pendingClaims > 0 && need > 0 {
		// A burst is being served: its claims need the API server and the node's CPU more than new members
		// do (starting sandboxed pods takes both). Each claim's status write wakes the pool again.
		obs.refillWait = pendingClaimRecheck
		return nil
	}
	if obs.newestClaim != nil && need > 0 {
		// Starting sandboxed pods takes the node's CPU from the claims of a burst still being served: refill
		// once the burst is over.
		if wait := obs.newestClaim.Add(refillHoldoff).Sub(obs.now); wait > 0 {
			obs.refillWait = wait
			return nil
		}
	}
	for range need {
		name := pool.Name + "-" + utilrand.String(5)
		np := sandbox.BuildMemberPolicy(pool, name, *obs.resolved)
		if err := controllerutil.SetControllerReference(pool, np, r.Scheme); err != nil {
			return fmt.Errorf("owning member policy: %w", err)
		}
		if err := r.Create(ctx, np); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue // a name taken by chance; the next pass tries another
			}
			b, nerr := notTenant(ctx, r.Client, err, pool.Namespace, policyWrite)
			if b == nil && nerr == nil {
				return fmt.Errorf("creating member policy: %w", err)
			}
			obs.blocked = b
			return nerr
		}
		pod := sandbox.BuildMember(pool, name, *obs.resolved, obs.opts, obs.want.generation)
		if err := controllerutil.SetControllerReference(pool, pod, r.Scheme); err != nil {
			return fmt.Errorf("owning member pod: %w", err)
		}
		if err := r.Create(ctx, pod); err != nil {
			// The policy stays: removeOrphanPolicies deletes it once it is old enough.
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				b, nerr := notTenant(ctx, r.Client, err, pool.Namespace, podWrite)
				if b == nil {
					b = &blocker{reason: ReasonPodRejected, message: "the API server refused a member pod (a pods quota?): " + err.Error()}
				}
				obs.blocked = b
				return nerr
			}
			return fmt.Errorf("creating member pod: %w", err)
		}
		if err := r.linkPolicy(ctx, np, pod); err != nil {
			return err // the member stays unready until a later pass links it
		}
		r.created.add(client.ObjectKeyFromObject(pool), name, obs.now)
		obs.members = append(obs.members, member{pod: pod, kind: memberStarting})
		obs.podNames[name] = true
	}
	return nil
}

// linkPolicies gives the members whose policy does not have their pod among its owners yet (an earlier pass
// failed between the pod's create and the link) that owner.
func (r *PoolReconciler) linkPolicies(ctx context.Context, obs *poolObservation) error {
	for _, m := range obs.members {
		if m.unlinked {
			if err := r.linkPolicy(ctx, obs.memberPolicies[m.pod.Name], m.pod); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkPolicy adds the member's pod to its policy's owners, besides the pool. The policy must exist before the
// pod, so it cannot have the pod as owner from the start. With it, the policy of a claimed member outlives the
// pool: the garbage collector deletes an object only once all its owners are gone. A claim then need not
// touch the policy at all.
func (r *PoolReconciler) linkPolicy(ctx context.Context, np *networkingv1.NetworkPolicy, pod *corev1.Pod) error {
	if np == nil || ownedByPod(np, pod.Name, pod.UID) {
		return nil
	}
	np = np.DeepCopy()
	patch := client.MergeFromWithOptions(np.DeepCopy(), client.MergeFromWithOptimisticLock{})
	np.OwnerReferences = append(np.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID})
	if err := r.Patch(ctx, np, patch); client.IgnoreNotFound(ignoreConflict(err)) != nil {
		return fmt.Errorf("adding member pod %s to its policy's owners: %w", pod.Name, err)
	}
	return nil
}

// retireStale deletes members of an older generation: at once while they are not ready, and ready ones only
// while the pool keeps at least minReadyDuringRollout ready members of either generation.
func (r *PoolReconciler) retireStale(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	var ready int32
	for _, m := range obs.members {
		if m.kind == memberReady {
			ready++
		}
	}
	for i := range obs.members {
		m := &obs.members[i]
		if !m.stale || m.kind == memberUnusable {
			continue
		}
		if m.kind == memberReady {
			if ready-1 < pool.Spec.MinReadyDuringRollout {
				continue
			}
			ready--
		}
		if err := r.deleteMember(ctx, m.pod); err != nil {
			return err
		}
		m.kind = memberUnusable
		obs.retired++
	}
	return nil
}

// deleteMember deletes a member pod only as it was read: the resourceVersion precondition fails if a claim has
// taken it since, and a claimed member is never deleted by the pool.
func (r *PoolReconciler) deleteMember(ctx context.Context, pod *corev1.Pod) error {
	uid, rv := pod.UID, pod.ResourceVersion
	err := r.Delete(ctx, pod, client.GracePeriodSeconds(podDeleteGrace), client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting member %s: %w", pod.Name, err)
	}
	return nil
}

// removeOrphanPolicies deletes the pool's policies whose pod is gone: after the pod, never before it.
func (r *PoolReconciler) removeOrphanPolicies(ctx context.Context, obs *poolObservation) error {
	var errs []error
	for name, np := range obs.memberPolicies {
		if obs.podNames[name] {
			continue
		}
		if age := obs.now.Sub(np.CreationTimestamp.Time); age < orphanPolicyAge {
			if wait := orphanPolicyAge - age; obs.orphanWait == 0 || wait < obs.orphanWait {
				obs.orphanWait = wait
			}
			continue
		}
		uid, rv := np.UID, np.ResourceVersion
		err := r.Delete(ctx, np, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting orphaned member policy %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
