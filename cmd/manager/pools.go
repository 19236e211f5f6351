package main

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"airlock.dev/airlock/internal/controller"
	"airlock.dev/airlock/internal/metrics"
)

// setupPools registers the SandboxPool reconciler and gives the Sandbox reconciler its claimer, both with the
// Sandbox reconciler's settings: a member's pod must be the pod that reconciler would make.
func setupPools(mgr ctrl.Manager, r *controller.SandboxReconciler) error {
	m, err := metrics.NewPool(crmetrics.Registry)
	if err != nil {
		return fmt.Errorf("registering pool metrics: %w", err)
	}
	r.Pools = &controller.PoolClaimer{Client: r.Client, APIReader: r.APIReader, Scheme: r.Scheme,
		Defaults: r.Defaults, Pod: r.Pod, Metrics: m, Attestations: r.Attestations}
	p := &controller.PoolReconciler{Client: r.Client, APIReader: r.APIReader, Scheme: r.Scheme,
		Recorder: mgr.GetEventRecorder("airlock-manager"), Clock: clock.RealClock{}, Defaults: r.Defaults, Pod: r.Pod,
		EgressProxy: r.EgressProxy, Attestations: r.Attestations}
	if err := p.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up pool controller: %w", err)
	}
	return nil
}
