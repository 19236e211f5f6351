// Package controller holds the Sandbox reconciler.
package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"airlock.dev/airlock/internal/metrics"
	"airlock.dev/airlock/internal/sandbox"
)

const (
	// Finalizer lets the controller record usage and remove the pod before the Sandbox goes away.
	Finalizer = "sandbox.airlock.dev/cleanup"
	// ReportingController names the manager in the events it writes itself (the usage record).
	ReportingController = "airlock-manager"
	// FieldOwner is the server-side-apply field manager of the objects the controller fully owns.
	FieldOwner = "airlock-manager"

	indexTemplate = "spec.templateRef.name"
	// indexPolicySelects indexes NetworkPolicies by the sandbox name their selector requires (sandbox.SelectedName).
	indexPolicySelects = "airlock.policy.selects"
	// retryBlocked is how often a sandbox blocked on something without a watch (a rejected pod) is retried.
	retryBlocked = 30 * time.Second
	// retryProxy is how often a sandbox waiting for the egress proxy's Service looks again.
	retryProxy = 5 * time.Second
	// retryAttestation is how soon a pod whose gate passed is looked at again while its log lacks PID 1's
	// attestation (the kubelet writes it out moments later).
	retryAttestation = 50 * time.Millisecond
)

// SandboxReconciler turns each Sandbox into one Pod and one NetworkPolicy, enforces its hard expiry and cleans
// up on deletion. It is the only writer of Sandbox status but status.lastActivityAt, which the exec gateway
// patches and the reconciler only reads; its full-status updates carry the resourceVersion, so a concurrent
// activity patch makes them conflict and retry rather than be lost.
type SandboxReconciler struct {
	client.Client
	// APIReader reads past the cache; used only to confirm that a pod is really gone before failing a sandbox.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Clock     clock.PassiveClock
	Defaults  sandbox.Defaults
	Pod       sandbox.PodOptions
	Metrics   *metrics.Controller
	// EgressProxy finds the egress proxy for sandboxes with an allowlist; nil when none is installed.
	EgressProxy *ProxyLocator
	// Workers is how many sandboxes are reconciled at once.
	Workers int
	// Pools claims warm members for sandboxes that name a SandboxPool (sandbox_claim.go); nil: never.
	Pools *PoolClaimer
	// Attestations reads what pods' PID 1 attested (shared with the pool reconciler and Pools).
	Attestations *Attestations

	written writtenVersions
	running runningSince
}

// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandbox.airlock.dev,resources=sandboxpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch
// Writes to sandbox pods and policies only in tenants (rbac.go):
// +kubebuilder:rbac:groups="",resources=pods,verbs=create;patch;delete,roleName=airlock-manager-tenant
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=create;update;patch;delete,roleName=airlock-manager-tenant
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the named steps in order. Each step either completes or returns the result to stop with.
func (r *SandboxReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sbx := &airlockv1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, sbx); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.forget(req.NamespacedName)
			r.running.prune(req.NamespacedName, func(string) bool { return false })
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.stale(req.NamespacedName, sbx.ResourceVersion) {
		// Older than our own last write: its watch event brings the sandbox back (the requeue is a safety net).
		return ctrl.Result{RequeueAfter: staleRecheck}, nil
	}
	before := sbx.Status.DeepCopy()
	if !sbx.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, sbx, before)
	}
	if done, err := r.ensureFinalizer(ctx, sbx); done || err != nil {
		return ctrl.Result{}, ignoreConflict(err)
	}

	obs := observation{now: r.Clock.Now(), defaults: r.Defaults}
	resolved, err := r.resolve(ctx, sbx, &obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.locateEgressProxy(ctx, &resolved, &obs); err != nil {
		return ctrl.Result{}, err
	}
	r.computeExpiry(sbx, resolved, &obs)
	if obs.expired() {
		return ctrl.Result{}, ignoreConflict(r.expire(ctx, sbx, before, obs))
	}
	if err := r.claimFromPool(ctx, sbx, resolved, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if obs.blocked == nil {
		if err := r.ensurePolicy(ctx, sbx, resolved, &obs); err != nil {
			return ctrl.Result{}, err
		}
	}
	if obs.blocked == nil {
		if err := r.ensurePod(ctx, sbx, resolved, &obs); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.nudgeProbe(ctx, sbx, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observeIsolation(ctx, sbx, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observeRuntime(ctx, sbx, &obs); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeClaimedStatus(ctx, sbx, before, obs); err != nil {
		return ctrl.Result{}, ignoreConflict(err)
	}
	return r.requeue(obs), nil
}

// requeue wakes the sandbox at its nearer expiry (hard or idle), or sooner when it is blocked on something
// nothing watches. Recorded activity moves the idle deadline later; its status write brings a reconcile that
// requeues again, so waking at an outdated deadline only costs a look.
func (r *SandboxReconciler) requeue(obs observation) ctrl.Result {
	at, _ := firstExpiry(obs.expiresAt, obs.idleExpiresAt)
	after := at.Sub(obs.now)
	if (obs.blocked != nil && (obs.blocked.reason == ReasonPodRejected || obs.blocked.reason == ReasonNamespaceNotTenant)) || obs.evidenceErr != nil {
		after = min(after, retryBlocked) // nodes, quotas and RoleBindings are not watched
	}
	if obs.blocked != nil && obs.blocked.reason == ReasonEgressProxyUnavailable {
		after = min(after, retryProxy) // the proxy's Service is not watched; it usually comes up with the install
	}
	if obs.nudgeAt != nil {
		after = min(after, obs.nudgeAt.Sub(obs.now)) // nothing else wakes us if the probe never runs
	}
	if obs.attestationPending {
		after = min(after, retryAttestation) // logs are not watched
	}
	return ctrl.Result{RequeueAfter: max(after, time.Millisecond)}
}

// writeStatus writes the computed status once, only if it changed, then emits events for the transitions.
func (r *SandboxReconciler) writeStatus(ctx context.Context, sbx *airlockv1.Sandbox, before *airlockv1.SandboxStatus, obs observation) error {
	sbx.Status = computeStatus(sbx, obs)
	if equality.Semantic.DeepEqual(*before, sbx.Status) {
		return nil
	}
	if err := r.Status().Update(ctx, sbx); err != nil {
		return err
	}
	r.written.record(client.ObjectKeyFromObject(sbx), sbx.ResourceVersion)
	r.recordTransitions(sbx, before, obs.now)
	return nil
}

// SetupWithManager watches Sandboxes, the pods and policies they own, every NetworkPolicy (another policy can
// undo isolation), templates and runtime classes (a pending sandbox may be waiting for one).
func (r *SandboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &airlockv1.Sandbox{}, indexTemplate, func(o client.Object) []string {
		if ref := o.(*airlockv1.Sandbox).Spec.TemplateRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &networkingv1.NetworkPolicy{}, indexPolicySelects, func(o client.Object) []string {
		return []string{sandbox.SelectedName(o.(*networkingv1.NetworkPolicy))}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&airlockv1.Sandbox{}).
		Owns(&corev1.Pod{}).
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesForPolicy)).
		Watches(&airlockv1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.pendingForTemplate),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&nodev1.RuntimeClass{}, handler.EnqueueRequestsFromMapFunc(r.pendingForRuntimeClass)).
		Watches(&airlockv1.SandboxPool{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesWaitingForPool)).
		Named("sandbox").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

// sandboxesForPolicy maps our policy to its sandbox (a pool member's to the sandbox that claimed the member, if
// any), and any other policy to every sandbox in its namespace.
func (r *SandboxReconciler) sandboxesForPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	if _, ok := o.GetLabels()[sandbox.LabelPool]; ok && o.GetLabels()[sandbox.LabelManagedBy] == sandbox.ManagedByValue {
		pod := &corev1.Pod{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, pod); err != nil {
			return nil // no pod: no sandbox has it
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Sandbox" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
		}
		return nil
	}
	if name, ok := o.GetLabels()[sandbox.LabelName]; ok && o.GetLabels()[sandbox.LabelManagedBy] == sandbox.ManagedByValue {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	}
	return r.requests(ctx, func(*airlockv1.Sandbox) bool { return true }, client.InNamespace(o.GetNamespace()))
}

func (r *SandboxReconciler) pendingForTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, waitingForPod, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexTemplate: o.GetName()})
}

func (r *SandboxReconciler) pendingForRuntimeClass(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requests(ctx, waitingForPod)
}

func waitingForPod(s *airlockv1.Sandbox) bool { return s.Status.PodName == "" }

func (r *SandboxReconciler) requests(ctx context.Context, keep func(*airlockv1.Sandbox) bool, opts ...client.ListOption) []reconcile.Request {
	var list airlockv1.SandboxList
	if err := r.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "listing sandboxes to requeue")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if keep(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// ignoreConflict drops optimistic-concurrency conflicts: the newer object's watch event reconciles again.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
