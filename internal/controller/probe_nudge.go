package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// The kubelet runs a new container's first readiness probe the moment it sees the container run. In 3-4 of 20
// cold starts on the local cluster its prober read the pod's status just before the status that says "running"
// was stored, found no running container and skipped; the next probe came a period (1 s) later, and the sandbox
// was Ready a second late. A change to the pod's annotations makes the kubelet sync the pod again, and that sync
// triggers the probe again. So the pod of a starting sandbox or pool member whose container has run for
// probeNudgeAfter without passing its probe gets one annotation. If the probe did run and PID 1 is holding it
// until its gate passes, the nudge costs one pod patch and changes nothing.
const (
	// AnnotationProbeNudged records when the manager re-triggered the pod's readiness probe.
	AnnotationProbeNudged = "sandbox.airlock.dev/probe-nudged"
	// probeNudgeAfter is well past a normal start's wait from "running" to Ready (the network policy taking
	// effect, then the probe: 90-130 ms at p50 on the local cluster), and well short of the probe period.
	probeNudgeAfter = 300 * time.Millisecond
)

// runningSince remembers when a reconciler first saw a starting pod's sandbox container run (the container
// status's startedAt has whole seconds only), by pod, with the Sandbox or pool that owns the entry.
type runningSince struct {
	mu sync.Mutex
	m  map[types.NamespacedName]seenRunning
}

type seenRunning struct {
	uid   types.UID
	at    time.Time
	owner types.NamespacedName
}

// seen returns when the pod was first seen running, recording now if it had not been.
func (r *runningSince) seen(pod *corev1.Pod, owner types.NamespacedName, now time.Time) time.Time {
	key := client.ObjectKeyFromObject(pod)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.NamespacedName]seenRunning{}
	}
	if s, ok := r.m[key]; ok && s.uid == pod.UID {
		return s.at
	}
	r.m[key] = seenRunning{uid: pod.UID, at: now, owner: owner}
	return now
}

// forget drops the pod's entry: it passed its probe, was nudged, or is going.
func (r *runningSince) forget(pod types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, pod)
}

// prune drops owner's entries for the pods keep does not name: they are gone, or no longer starting.
func (r *runningSince) prune(owner types.NamespacedName, keep func(pod string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.m {
		if s.owner == owner && !keep(k.Name) {
			delete(r.m, k)
		}
	}
}

// nudgeSkippedProbe annotates a starting pod, once, when its container has run for probeNudgeAfter without
// passing its readiness probe. It returns when to look again, or the zero time when there is no need.
func nudgeSkippedProbe(ctx context.Context, c client.Client, since *runningSince, owner types.NamespacedName, pod *corev1.Pod, now time.Time) (time.Time, error) {
	key := client.ObjectKeyFromObject(pod)
	if !pod.DeletionTimestamp.IsZero() || gatePassed(pod) || !containerRunning(pod) || pod.Annotations[AnnotationProbeNudged] != "" {
		since.forget(key)
		return time.Time{}, nil
	}
	first := since.seen(pod, owner, now)
	if due := first.Add(probeNudgeAfter); now.Before(due) {
		return due, nil
	}
	nudged := pod.DeepCopy()
	if nudged.Annotations == nil {
		nudged.Annotations = map[string]string{}
	}
	nudged.Annotations[AnnotationProbeNudged] = now.UTC().Format(time.RFC3339Nano)
	if err := c.Patch(ctx, nudged, client.MergeFrom(pod)); err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("annotating pod %s to re-trigger its readiness probe: %w", pod.Name, err)
	}
	since.forget(key)
	log.FromContext(ctx).V(1).Info("pod not ready a while after its container started: re-triggered its readiness probe",
		"pod", pod.Name, "runningFor", now.Sub(first))
	return time.Time{}, nil
}

// nudgeProbe re-triggers the readiness probe of a starting sandbox's pod (nudgeSkippedProbe) and sets
// obs.nudgeAt for requeue. A sandbox whose gate was seen passing (its isolation evidence is recorded) is not
// starting.
func (r *SandboxReconciler) nudgeProbe(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) error {
	owner := client.ObjectKeyFromObject(sbx)
	switch {
	case obs.pod == nil:
		r.running.prune(owner, func(string) bool { return false })
		return nil
	case sbx.Status.IsolationEvidence != nil:
		// Most passes of most sandboxes: drop the one entry there may be, without a scan.
		r.running.forget(client.ObjectKeyFromObject(obs.pod))
		return nil
	}
	due, err := nudgeSkippedProbe(ctx, r.Client, &r.running, owner, obs.pod, obs.now)
	if !due.IsZero() {
		obs.nudgeAt = &due
	}
	return err
}

// nudgeMembers re-triggers the readiness probe of the pool's starting members (nudgeSkippedProbe): a member
// is claimable only once it passed. It sets obs.nudgeWait until the nearest one is due.
func (r *PoolReconciler) nudgeMembers(ctx context.Context, pool *airlockv1.SandboxPool, obs *poolObservation) error {
	owner := client.ObjectKeyFromObject(pool)
	starting := map[string]bool{}
	for _, m := range obs.members {
		if m.pod == nil || m.kind != memberStarting {
			continue
		}
		starting[m.pod.Name] = true
		due, err := nudgeSkippedProbe(ctx, r.Client, &r.running, owner, m.pod, obs.now)
		if err != nil {
			return err
		}
		if wait := due.Sub(obs.now); !due.IsZero() && (obs.nudgeWait == 0 || wait < obs.nudgeWait) {
			obs.nudgeWait = max(wait, time.Millisecond)
		}
	}
	r.running.prune(owner, func(pod string) bool { return starting[pod] })
	return nil
}
