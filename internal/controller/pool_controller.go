package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

const (
	indexPoolTemplate = "spec.templateRef.name"
	indexSandboxPool  = "spec.poolRef.name"
	// demandWindow is how far back claims count as demand for a pool with maxReplicas.
	demandWindow = 5 * time.Minute
	// maxStarting bounds the members of a pool that start at once, those of earlier passes included: a node
	// starting dozens of sandboxed pods at once slows every one of them (on the 2-core local node, 20 gVisor
	// starts next to 20 deletions timed out in containerd), and each finished start brings another pass.
	maxStarting = 5
	// refillHoldoff is how long after the latest claim the pool waits before starting members.
	refillHoldoff = time.Second
	// pendingClaimWindow bounds how long an undecided claim holds the refill back; pendingClaimRecheck is how
	// soon the pool looks again while one does (the claims' status writes usually wake it first).
	pendingClaimWindow  = 10 * time.Second
	pendingClaimRecheck = 250 * time.Millisecond
	// memberStartSlack is how much longer than its network gate's timeout a member may take to be ready.
	memberStartSlack = 2 * time.Minute
	// orphanPolicyAge is how old a member policy without a pod must be before it is removed: younger, its pod
	// may just not be in the cache yet. It also bounds how long a created member not yet in the cache counts.
	orphanPolicyAge = time.Minute
)

// PoolReconciler keeps each SandboxPool's unclaimed members: bare pods with their own deny-all policy, made
// from the pool's template exactly as a Sandbox's pod would be, proven isolated by the same gate. It is the
// only writer of SandboxPool status. It never touches a claimed member: a claim moves the pod's and policy's
// controller reference to the Sandbox under an optimistic lock, and every delete here carries the member's
// resourceVersion, so a member claimed since it was read is left alone.
type PoolReconciler struct {
	client.Client
	// APIReader confirms past the cache that a member's policy is missing before the member is replaced.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Clock     clock.PassiveClock
	Defaults  sandbox.Defaults
	Pod       sandbox.PodOptions
	// EgressProxy finds the egress proxy for members with an allowlist; nil when none is installed.
	EgressProxy *ProxyLocator
	// Attestations reads what members' PID 1 attested (shared with the Sandbox reconciler, which claims them).
	Attestations *Attestations

	// created are the members this process created that the cache has not shown yet (creations.go).
	created creations
	// running are when starting members were first seen running (probe_nudge.go).
	running runningSince
}

// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch
// Writes to member pods and policies only in tenants (rbac.go):
// +kubebuilder:rbac:groups="",resources=pods,verbs=create;patch;delete,roleName=airlock-manager-tenant
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=create;patch;delete,roleName=airlock-manager-tenant

// Reconcile runs the pool's steps: resolve the template, classify the members, replace the unusable ones,
// start what is missing, retire the stale ones, then write status once.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &airlockv1.SandboxPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the members with the pool
	}
	before := pool.Status.DeepCopy()
	obs := poolObservation{now: r.Clock.Now()}
	if err := r.resolveMember(ctx, pool, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observeMembers(ctx, pool, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.nudgeMembers(ctx, pool, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observeDemand(ctx, pool, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.removeUnusable(ctx, pool, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.linkPolicies(ctx, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if obs.blocked == nil {
		if err := r.createMembers(ctx, pool, &obs); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.retireStale(ctx, pool, &obs); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.removeOrphanPolicies(ctx, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writePoolStatus(ctx, pool, before, obs); err != nil {
		return ctrl.Result{}, ignoreConflict(err)
	}
	return poolRequeue(obs), nil
}

// retriedBlocker tells whether a pool blocked for reason waits on something no watch reports.
func retriedBlocker(reason string) bool {
	return reason == ReasonPodRejected || reason == ReasonEgressProxyUnavailable || reason == ReasonNamespaceNotTenant
}

// poolRequeue wakes the pool when its oldest recent claim leaves the demand window, or soon when it is blocked
// on something without a watch.
func poolRequeue(obs poolObservation) ctrl.Result {
	after := time.Duration(0)
	if obs.oldestClaim != nil {
		after = obs.oldestClaim.Add(demandWindow).Sub(obs.now)
	}
	for _, wait := range []time.Duration{obs.orphanWait, obs.startWait, obs.refillWait, obs.nudgeWait} {
		if wait > 0 && (after <= 0 || wait < after) {
			after = wait
		}
	}
	if obs.blocked != nil && retriedBlocker(obs.blocked.reason) && (after <= 0 || retryBlocked < after) {
		after = retryBlocked // quotas, RoleBindings and the proxy's Service are not watched
	}
	if after <= 0 {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: after}
}

// writePoolStatus writes the computed status once, only if it changed, then emits events for transitions.
func (r *PoolReconciler) writePoolStatus(ctx context.Context, pool *airlockv1.SandboxPool, before *airlockv1.SandboxPoolStatus, obs poolObservation) error {
	pool.Status = computePoolStatus(pool, obs)
	if equality.Semantic.DeepEqual(*before, pool.Status) {
		return nil
	}
	if err := r.Status().Update(ctx, pool); err != nil {
		return err
	}
	r.recordPoolTransitions(pool, before)
	return nil
}

// SetupWithManager watches pools, the members and policies they own (a claim moves them away, which the
// owner handler reports to the pool too), every other NetworkPolicy (it may undo a member's isolation),
// templates (a change replaces members) and Sandboxes naming a pool (their claims are its demand).
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &airlockv1.SandboxPool{}, indexPoolTemplate, func(o client.Object) []string {
		return []string{o.(*airlockv1.SandboxPool).Spec.TemplateRef.Name}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &airlockv1.Sandbox{}, indexSandboxPool, func(o client.Object) []string {
		if ref := o.(*airlockv1.Sandbox).Spec.PoolRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&airlockv1.SandboxPool{}).
		Owns(&corev1.Pod{}).
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(r.poolsForPolicy)).
		Watches(&airlockv1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.poolsForTemplate),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&airlockv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(poolOfSandbox)).
		Named("sandboxpool").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// poolsForPolicy maps a member's policy to its pool, a sandbox's own policy to nothing, and any other policy
// to every pool in its namespace.
func (r *PoolReconciler) poolsForPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[sandbox.LabelManagedBy] == sandbox.ManagedByValue {
		if p, ok := l[sandbox.LabelPool]; ok {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: p}}}
		}
		if _, ok := l[sandbox.LabelName]; ok {
			return nil
		}
	}
	return r.poolRequests(ctx, client.InNamespace(o.GetNamespace()))
}

func (r *PoolReconciler) poolsForTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	return r.poolRequests(ctx, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexPoolTemplate: o.GetName()})
}

func poolOfSandbox(_ context.Context, o client.Object) []reconcile.Request {
	if ref := o.(*airlockv1.Sandbox).Spec.PoolRef; ref != nil {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	return nil
}

func (r *PoolReconciler) poolRequests(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var list airlockv1.SandboxPoolList
	if err := r.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "listing sandbox pools to requeue")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
