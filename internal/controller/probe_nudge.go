package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// The kubelet runs a new container's first readiness probe the moment it sees the container run. About one
// cold start in eight its prober reads the pod's status just before the status that says "running" is
// stored, finds no running container and skips; the next probe comes a period (1 s) later, and the sandbox is
// Ready a second late. A change to the pod's annotations makes the kubelet sync the pod again, and that sync
// triggers the probe again. So a starting sandbox whose container has run for probeNudgeAfter without passing
// its probe gets one annotation on its pod, once. PID 1 answers a probe the moment its gate passes, so when
// the probe did run and is only waiting for the gate, the extra one costs nothing.
const (
	// AnnotationProbeNudged records when the manager re-triggered the pod's readiness probe.
	AnnotationProbeNudged = "sandbox.airlock.dev/probe-nudged"
	// probeNudgeAfter is well past a normal start's wait from "running" to Ready (the network policy taking
	// effect, then the probe: 90-130 ms at p50 on the local cluster), and well short of the probe period.
	probeNudgeAfter = 300 * time.Millisecond
)

// runningSince remembers when the reconciler first saw a starting sandbox's container run: the container
// status's startedAt has whole seconds only.
type runningSince struct {
	mu sync.Mutex
	m  map[types.NamespacedName]seenRunning
}

type seenRunning struct {
	pod types.UID
	at  time.Time
}

// seen returns when the sandbox's pod (by UID) was first seen running, recording now if it had not been.
func (r *runningSince) seen(key types.NamespacedName, pod types.UID, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.NamespacedName]seenRunning{}
	}
	if s, ok := r.m[key]; ok && s.pod == pod {
		return s.at
	}
	r.m[key] = seenRunning{pod: pod, at: now}
	return now
}

// forget drops the sandbox's entry: its pod passed its probe, was nudged, or is gone.
func (r *runningSince) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}

// nudgeProbe annotates, once, the pod of a starting sandbox whose container has run for probeNudgeAfter
// without passing its readiness probe, and sets obs.nudgeAt for requeue until then. A sandbox whose gate
// was seen passing (its isolation evidence is recorded) is not starting.
func (r *SandboxReconciler) nudgeProbe(ctx context.Context, sbx *airlockv1.Sandbox, obs *observation) error {
	key := client.ObjectKeyFromObject(sbx)
	p := obs.pod
	if p == nil || !p.DeletionTimestamp.IsZero() || sbx.Status.IsolationEvidence != nil || gatePassed(p) ||
		!containerRunning(p) || p.Annotations[AnnotationProbeNudged] != "" {
		r.running.forget(key)
		return nil
	}
	due := r.running.seen(key, p.UID, obs.now).Add(probeNudgeAfter)
	if obs.now.Before(due) {
		obs.nudgeAt = &due
		return nil
	}
	nudged := p.DeepCopy()
	if nudged.Annotations == nil {
		nudged.Annotations = map[string]string{}
	}
	nudged.Annotations[AnnotationProbeNudged] = obs.now.UTC().Format(time.RFC3339Nano)
	if err := r.Patch(ctx, nudged, client.MergeFrom(p)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating pod %s to re-trigger its readiness probe: %w", p.Name, err)
	}
	r.running.forget(key)
	log.FromContext(ctx).V(1).Info("pod not ready a while after its container started: re-triggered its readiness probe",
		"pod", p.Name, "after", obs.now.Sub(due.Add(-probeNudgeAfter)))
	return nil
}
