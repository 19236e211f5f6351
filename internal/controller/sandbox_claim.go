package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/metrics"
	"airlock.dev/airlock/internal/sandbox"
)

// A claim adopts a ready pool member for a Sandbox that names a pool. The pod is the unit of the claim: one
// merge patch under an optimistic lock (the member's resourceVersion as read) moves its controller reference
// from the pool to the Sandbox and marks it with the claim. Of any number of racing claimers exactly one patch
// succeeds; the others get a conflict and try another member (claims of one manager first reserve a member in
// memory, so that they seldom race each other at all). The Sandbox's status then records the pod, the claim
// and its time, from which usage and the idle timeout count.
//
// A claim changes no label (but the sandbox's own spec.labels, if it has any) and leaves the member's policy
// as it is: the node's network policy agent (kube-router) rebuilds all its rules on every pod label change and
// every NetworkPolicy update, which in a burst of claims costs more CPU than the claims themselves. The pod is
// the sandbox's by its controller reference and the Sandbox's status.podName, not by a label. The policy
// selects sandbox.airlock.dev/pod, which never changes, denies what the sandbox's own would, and has the pod
// as an owner besides the pool, so that deleting the pool leaves it to the claimed pod (the garbage collector
// deletes an object only once all its owners are gone).

// ReasonWaitingForMember: the sandbox's pool is drained and its whenDrained is Wait.
const ReasonWaitingForMember = "WaitingForPoolMember"

// claimObs is what the claim step decided.
type claimObs struct {
	pool string
	warm bool
	// at and generation describe a warm claim; message why a claim went cold.
	at         metav1.Time
	generation int64
	message    string
}

func (c *claimObs) status() *airlockv1.PoolClaimStatus {
	if !c.warm {
		return &airlockv1.PoolClaimStatus{Name: c.pool, Result: airlockv1.ClaimCold, Message: c.message}
	}
	at := c.at
	return &airlockv1.PoolClaimStatus{Name: c.pool, Result: airlockv1.ClaimWarm, ClaimedAt: &at, TemplateGeneration: c.generation}
}

// PoolClaimer adopts pool members for the Sandbox reconciler.
type PoolClaimer struct {
	Client client.Client
	// APIReader re-reads a member's policy past the cache when adopting it conflicts.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Defaults  sandbox.Defaults
	Pod       sandbox.PodOptions
	Metrics   *metrics.Pool
	// Attestations reads what members' PID 1 attested (the pool reconciler has usually read them already).
	Attestations *Attestations

	reserved reservations
}

// claimFromPool decides, once, how a sandbox that names a pool gets its pod: a ready member (obs.pod and
// obs.claim set), a cold create (obs.claim set, not warm: ensurePolicy and ensurePod go on as without a
// pool), or, for a drained pool whose whenDrained is Wait, not yet (obs.blocked).
func (r *SandboxReconciler) claimFromPool(ctx context.Context, sbx *airlockv1.Sandbox, res sandbox.Resolved, obs *observation) error {
	c := r.Pools
	if c == nil || sbx.Spec.PoolRef == nil || sbx.Status.PodName != "" || sbx.Status.Pool != nil || obs.blocked != nil {
		return nil
	}
	if done, err := c.recoverClaim(ctx, sbx, obs); done || err != nil {
		return err
	}
	pool := &airlockv1.SandboxPool{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Spec.PoolRef.Name}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting pool %s: %w", sbx.Spec.PoolRef.Name, err)
		}
		c.cold(sbx, obs, fmt.Sprintf("SandboxPool %q does not exist", sbx.Spec.PoolRef.Name))
		return nil
	}
	if pool.Spec.TemplateRef.Name != sbx.Spec.TemplateRef.Name {
		c.cold(sbx, obs, fmt.Sprintf("the pool's template is %q, the sandbox's %q", pool.Spec.TemplateRef.Name, sbx.Spec.TemplateRef.Name))
		return nil
	}
	want, err := c.wantFor(ctx, sbx, pool, res)
	if err != nil {
		return err
	}
	if want == nil {
		c.cold(sbx, obs, "the sandbox's settings differ from the pool's")
		return nil
	}
	candidates, err := c.readyMembers(ctx, pool, *want)
	if err != nil {
		return err
	}
	tried := map[types.UID]bool{}
	for {
		pod, mine := c.reserved.pick(candidates, tried, time.Now())
		if pod == nil {
			break
		}
		tried[pod.UID] = true
		won, err := c.take(ctx, sbx, pod, obs.now)
		if mine && (err != nil || !won) {
			c.reserved.release(pod.UID)
		}
		if err != nil {
			return err
		}
		if !won {
			continue
		}
		obs.pod = pod
		obs.claim = &claimObs{pool: pool.Name, warm: true, at: metav1.NewTime(obs.now), generation: want.generation}
		c.Metrics.Claim(sbx.Namespace, pool.Name, metrics.ClaimWarm)
		return nil
	}
	if pool.Spec.WhenDrained == airlockv1.DrainedWait {
		obs.blocked = &blocker{reason: ReasonWaitingForMember,
			message: fmt.Sprintf("SandboxPool %s has no ready member of template generation %d: waiting for one (whenDrained: Wait)", pool.Name, want.generation)}
		return nil
	}
	c.cold(sbx, obs, fmt.Sprintf("SandboxPool %s had no ready member of template generation %d", pool.Name, want.generation))
	return nil
}

func (c *PoolClaimer) cold(sbx *airlockv1.Sandbox, obs *observation, msg string) {
	obs.claim = &claimObs{pool: sbx.Spec.PoolRef.Name, message: msg + "; created a pod cold"}
	c.Metrics.Claim(sbx.Namespace, sbx.Spec.PoolRef.Name, metrics.ClaimCold)
}

// recoverClaim finds the pod an earlier pass claimed or created for the sandbox when its status write did not
// land: claiming again would take a second member. A cold pod has the sandbox's name; a claimed member keeps
// its pool's label.
func (c *PoolClaimer) recoverClaim(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) (bool, error) {
	own := &corev1.Pod{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Name}, own)
	switch {
	case err == nil && metav1.IsControlledBy(own, sbx):
		obs.claim = &claimObs{pool: sbx.Spec.PoolRef.Name, message: "created a pod cold"}
		return false, nil // ensurePod finds it
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("getting the sandbox's pod: %w", err)
	}
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(sbx.Namespace), client.MatchingLabels{sandbox.LabelPool: sbx.Spec.PoolRef.Name}); err != nil {
		return false, fmt.Errorf("listing the pool's pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, sbx) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, pod.Annotations[sandbox.AnnotationClaimedAt])
		if err != nil {
			at = obs.now
		}
		obs.pod = pod
		obs.claim = &claimObs{pool: sbx.Spec.PoolRef.Name, warm: true, at: metav1.NewTime(at), generation: sandbox.MemberGeneration(pod)}
		return true, nil
	}
	return false, nil
}

// wantFor is what a member must be for this sandbox: made from the template's current generation, with the
// pod spec the sandbox's own settings (less env and labels, bound late) give. nil: the sandbox cannot resolve
// as a member would.
func (c *PoolClaimer) wantFor(ctx context.Context, sbx *airlockv1.Sandbox, pool *airlockv1.SandboxPool, res sandbox.Resolved) (*memberWant, error) {
	tmpl := &airlockv1.SandboxTemplate{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Spec.TemplateRef.Name}, tmpl); err != nil {
		return nil, fmt.Errorf("getting template %s: %w", sbx.Spec.TemplateRef.Name, err)
	}
	shape, err := sandbox.Resolve(sandbox.ClaimShape(sbx), tmpl, c.Defaults)
	if err != nil {
		return nil, nil //nolint:nilerr // resolve already reported the sandbox's own problem
	}
	shape.RuntimeHandler, shape.EgressProxy = res.RuntimeHandler, res.EgressProxy
	opts, err := gatedPodOptions(ctx, c.Client, c.Pod, c.Defaults, res.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	poolShape, err := sandbox.Resolve(sandbox.PoolSandbox(pool, pool.Name), tmpl, c.Defaults)
	if err != nil {
		return nil, nil //nolint:nilerr // the pool reports its own problem
	}
	poolShape.RuntimeHandler, poolShape.EgressProxy = res.RuntimeHandler, res.EgressProxy
	hash := sandbox.MemberHash(shape, opts)
	if hash != sandbox.MemberHash(poolShape, opts) {
		return nil, nil
	}
	return &memberWant{generation: tmpl.Generation, hash: hash, handler: res.RuntimeHandler, gateTarget: c.Pod.GateTarget,
		defaults: c.Defaults, policy: func(name string) *networkingv1.NetworkPolicy { return sandbox.BuildMemberPolicy(pool, name, shape) },
		attested: func(pod *corev1.Pod) (*attestation.Statement, error) { return c.Attestations.Of(ctx, pod) }}, nil
}

// readyMembers returns the pool's claimable members in random order, so that racing claimers spread over them
// instead of all trying the first.
func (c *PoolClaimer) readyMembers(ctx context.Context, pool *airlockv1.SandboxPool, want memberWant) ([]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(pool.Namespace), client.MatchingLabels{sandbox.LabelPool: pool.Name}); err != nil {
		return nil, fmt.Errorf("listing pool members: %w", err)
	}
	var policies networkingv1.NetworkPolicyList
	if err := c.Client.List(ctx, &policies, client.InNamespace(pool.Namespace)); err != nil {
		return nil, fmt.Errorf("listing network policies: %w", err)
	}
	byName := map[string]*networkingv1.NetworkPolicy{}
	for i := range policies.Items {
		if p := &policies.Items[i]; metav1.IsControlledBy(p, pool) {
			byName[p.Name] = p
		}
	}
	var ready []*corev1.Pod
	nodes := map[string]*corev1.Node{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, pool) || pod.DeletionTimestamp != nil {
			continue
		}
		node, ok := nodes[pod.Spec.NodeName]
		if !ok && pod.Spec.NodeName != "" {
			node = &corev1.Node{}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err != nil {
				node = nil
			}
			nodes[pod.Spec.NodeName] = node
		}
		if m := classifyMember(pod, byName[pod.Name], policies.Items, node, want); m.kind == memberReady && !m.stale {
			ready = append(ready, pod)
		}
	}
	rand.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
	return ready, nil
}

// take claims one member: false when another claim (or the pool) took or changed it first. A conflict is also
// what a kubelet status update since the cache's copy gives; the member is then read again and, still unclaimed
// and running, tried once more.
func (c *PoolClaimer) take(ctx context.Context, sbx *airlockv1.Sandbox, pod *corev1.Pod, now time.Time) (bool, error) {
	for try := 0; ; try++ {
		claimed := pod.DeepCopy()
		patch := client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})
		if claimed.Labels == nil {
			claimed.Labels = map[string]string{}
		}
		if claimed.Annotations == nil {
			claimed.Annotations = map[string]string{}
		}
		// The sandbox's own labels: a relabel, which a sandbox without any does not pay for.
		for k, v := range sbx.Spec.Labels {
			claimed.Labels[k] = v
		}
		claimed.Annotations[sandbox.AnnotationClaimedBy] = string(sbx.UID)
		claimed.Annotations[sandbox.AnnotationClaimedAt] = now.UTC().Format(time.RFC3339Nano)
		if err := c.moveController(sbx, claimed); err != nil {
			return false, err
		}
		err := c.Client.Patch(ctx, claimed, patch)
		switch {
		case err == nil:
			*pod = *claimed
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("claiming member %s: %w", pod.Name, err)
		case try > 0:
			return false, nil
		}
		fresh := &corev1.Pod{}
		if err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), fresh); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !stillUnclaimed(fresh, pod) {
			return false, nil
		}
		pod = fresh
	}
}

// stillUnclaimed tells whether a member read again is the one judged ready from the cache, still the pool's and
// still running.
func stillUnclaimed(fresh, judged *corev1.Pod) bool {
	passed := gatePassed(fresh)
	was, is := metav1.GetControllerOf(judged), metav1.GetControllerOf(fresh)
	return fresh.UID == judged.UID && fresh.DeletionTimestamp == nil && was != nil && is != nil && was.UID == is.UID &&
		fresh.Labels[sandbox.LabelPool] == judged.Labels[sandbox.LabelPool] && fresh.Labels[sandbox.LabelPool] != "" &&
		passed && fresh.Status.Phase == corev1.PodRunning && containerRunning(fresh)
}

// moveController replaces obj's controller reference (the pool's) with the sandbox's.
func (c *PoolClaimer) moveController(sbx *airlockv1.Sandbox, obj client.Object) error {
	refs := obj.GetOwnerReferences()[:0:0]
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller == nil || !*ref.Controller {
			refs = append(refs, ref)
		}
	}
	obj.SetOwnerReferences(refs)
	if err := controllerutil.SetControllerReference(sbx, obj, c.Scheme); err != nil {
		return fmt.Errorf("owning %s: %w", obj.GetName(), err)
	}
	return nil
}

// claimedMember is the member a sandbox adopted (in this pass or an earlier one), "" if none.
func claimedMember(sbx *airlockv1.Sandbox, obs *observation) string {
	switch {
	case obs.claim != nil && obs.claim.warm:
		return obs.pod.Name
	case sbx.Status.Pool != nil && sbx.Status.Pool.Result == airlockv1.ClaimWarm:
		return sbx.Status.PodName
	}
	return ""
}

// podNameOf is the sandbox's pod (and policy) name: a claimed member keeps its own.
func podNameOf(sbx *airlockv1.Sandbox) string {
	if sbx.Status.PodName != "" {
		return sbx.Status.PodName
	}
	return sbx.Name
}

// sandboxesWaitingForPool wakes the sandboxes of a pool that wait for a member, when the pool's status changes.
func (r *SandboxReconciler) sandboxesWaitingForPool(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, func(s *airlockv1.Sandbox) bool {
		return s.Spec.PoolRef != nil && s.Spec.PoolRef.Name == o.GetName() && s.Status.PodName == "" && s.Status.Pool == nil
	}, client.InNamespace(o.GetNamespace()))
}

// writeClaimedStatus writes status; after a warm claim a conflict is retried on a fresh read instead of left to
// the next pass, whose cache may not show the claimed pod yet and would claim another.
func (r *SandboxReconciler) writeClaimedStatus(ctx context.Context, sbx *airlockv1.Sandbox, before *airlockv1.SandboxStatus, obs observation) error {
	err := r.writeStatus(ctx, sbx, before, obs)
	for try := 0; try < 3 && apierrors.IsConflict(err) && obs.claim != nil && obs.claim.warm; try++ {
		fresh := &airlockv1.Sandbox{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(sbx), fresh); err != nil {
			return fmt.Errorf("re-reading the sandbox after its claim: %w", err)
		}
		*sbx = *fresh
		err = r.writeStatus(ctx, sbx, fresh.Status.DeepCopy(), obs)
	}
	return err
}
