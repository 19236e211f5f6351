package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

const (
	// podDeleteGrace is short: nothing in a sandbox deserves a graceful shutdown once it is deleted.
	podDeleteGrace int64 = 1
	// recheckTerminating is a safety net while the pod terminates; its watch event normally comes first.
	recheckTerminating = 5 * time.Second
	// staleRecheck is a safety net for a sandbox read older than our own last write of it; the write's watch
	// event normally comes first.
	staleRecheck = time.Second
)

// finalize removes the pod, then the policy (never the other way round: the pod must not run a moment without
// it), records the final usage and releases the Sandbox.
func (r *SandboxReconciler) finalize(ctx context.Context, sbx *airlockv1.Sandbox, before *airlockv1.SandboxStatus) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(sbx, Finalizer) {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	gone, err := r.deletePod(ctx, sbx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !gone {
		return ctrl.Result{RequeueAfter: recheckTerminating}, ignoreConflict(r.writeStatus(ctx, sbx, before, terminating(sbx, now)))
	}
	if err := r.deletePolicy(ctx, sbx); err != nil {
		return ctrl.Result{}, err
	}
	usage := sandbox.UsageSeconds(sbx.Status.StartedAt, now)
	size := sbx.Status.Size
	if size == "" {
		size = sandbox.DefaultSize
	}
	if err := r.recordUsage(ctx, sbx, usage, size); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFromWithOptions(sbx.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(sbx, Finalizer)
	if err := r.Patch(ctx, sbx, patch); err != nil {
		return ctrl.Result{}, ignoreConflict(client.IgnoreNotFound(err))
	}
	r.written.record(client.ObjectKeyFromObject(sbx), sbx.ResourceVersion)
	// The process's counter: after the finalizer is gone, so a retried finalize never counts twice here.
	r.Metrics.AddUsage(sbx.Namespace, string(size), usage)
	return ctrl.Result{}, nil
}

// recordUsage writes the sandbox's usage record, the Deleted event, before the finalizer goes: exactly once
// whatever dies when, since its name is the sandbox's UID and a retried finalize finds it exists. (An event
// recorder would be at most once: it writes in the background, and may drop or merge events under load.) In a
// namespace being deleted no event can be written: the usage is then only logged and counted.
func (r *SandboxReconciler) recordUsage(ctx context.Context, sbx *airlockv1.Sandbox, usage int64, size airlockv1.Size) error {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: sbx.Namespace, Name: fmt.Sprintf("%s.%s.usage", sbx.Name, sbx.UID)},
		EventTime:           metav1.NowMicro(),
		ReportingController: ReportingController,
		ReportingInstance:   ReportingController,
		Action:              "Delete",
		Reason:              "Deleted",
		Type:                corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: airlockv1.GroupVersion.String(), Kind: "Sandbox",
			Namespace: sbx.Namespace, Name: sbx.Name, UID: sbx.UID, ResourceVersion: sbx.ResourceVersion},
		Note: fmt.Sprintf("sandbox removed after %d sandbox-seconds (size %s)", usage, size),
	}
	err := r.Create(ctx, ev)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// Nothing new can be written in a namespace being deleted; holding the finalizer for it would hold
		// the namespace's deletion for ever. The usage goes to the log and the metric only.
		log.FromContext(ctx).Info("usage not recorded as an event: the namespace is being deleted",
			"sandbox", sbx.Name, "sandboxSeconds", usage, "size", size)
		return nil
	}
	return fmt.Errorf("recording usage: %w", err)
}

// terminating is what a sandbox being deleted is observed as: Terminating, still Expired by the deadline that
// expired it, if one did.
func terminating(sbx *airlockv1.Sandbox, now time.Time) observation {
	idle := fromSnapshot(sbx).IdleTimeout
	return observation{now: now, deleting: true, expiresAt: sbx.Status.ExpiresAt, policy: policyInEffect,
		idleTimeout: idle, idleExpiresAt: idleDeadline(&sbx.Status, idle)}
}

// deletePod deletes the sandbox's pod if it is ours and reports whether it is gone. It asks the API server, not
// the cache: deleting the policy while a stale cache hides a running pod would open it.
func (r *SandboxReconciler) deletePod(ctx context.Context, sbx *airlockv1.Sandbox) (bool, error) {
	pod := &corev1.Pod{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: podNameOf(sbx)}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("getting pod: %w", err)
	case !metav1.IsControlledBy(pod, sbx):
		return true, nil // not ours: leave it alone
	case pod.DeletionTimestamp != nil:
		return false, nil
	}
	uid := pod.UID
	err = r.Delete(ctx, pod, client.GracePeriodSeconds(podDeleteGrace), client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting pod: %w", err)
	}
	return false, nil
}

// claimedMembersPolicy tells whether np is the policy of the pool member sbx claimed, which the member kept.
// Its pod is gone by now, so it is known by the pod's name and the pool's.
func claimedMembersPolicy(np *networkingv1.NetworkPolicy, sbx *airlockv1.Sandbox) bool {
	c := sbx.Status.Pool
	return c != nil && c.Result == airlockv1.ClaimWarm && np.Labels[sandbox.LabelPool] == c.Name && ownedByPod(np, sbx.Status.PodName, "")
}

func (r *SandboxReconciler) deletePolicy(ctx context.Context, sbx *airlockv1.Sandbox) error {
	np := &networkingv1.NetworkPolicy{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: podNameOf(sbx)}, np)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting network policy: %w", err)
	}
	if !metav1.IsControlledBy(np, sbx) && !claimedMembersPolicy(np, sbx) {
		return nil
	}
	uid := np.UID
	if err := r.Delete(ctx, np, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting network policy: %w", err)
	}
	return nil
}
