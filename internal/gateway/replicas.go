package gateway

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ReplicaCounter counts the gateway's replicas as the ready endpoints of its own Service, from a watch of the
// Service's EndpointSlices: each replica then takes its share of the exec limits (Options.Replicas) without
// any API write per call. A replica that is not ready yet, or is terminating, is not counted; the count is
// at least one.
type ReplicaCounter struct {
	n    atomic.Int64
	log  logr.Logger
	what string
}

// WatchReplicas starts counting the ready endpoints of Service namespace/service and returns once the first
// list is in. It needs list and watch on endpointslices in namespace; a refused first list is an error, so
// that a gateway missing that permission fails at start instead of silently admitting too much.
func WatchReplicas(ctx context.Context, cs kubernetes.Interface, namespace, service string, log logr.Logger) (*ReplicaCounter, error) {
	sel := discoveryv1.LabelServiceName + "=" + service
	what := "Service " + namespace + "/" + service
	if _, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s to count gateway replicas (RBAC: list and watch endpointslices in %s): %w",
			what, namespace, err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	slices := f.Discovery().V1().EndpointSlices()
	r := &ReplicaCounter{log: log, what: what}
	r.n.Store(1)
	recount := func() {
		l, err := slices.Lister().List(labels.Everything())
		if err != nil {
			log.Error(err, "counting gateway replicas", "service", what)
			return
		}
		r.set(readyEndpoints(l))
	}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { recount() },
		UpdateFunc: func(any, any) { recount() },
		DeleteFunc: func(any) { recount() },
	}); err != nil {
		return nil, fmt.Errorf("watching the EndpointSlices of %s: %w", what, err)
	}
	f.Start(ctx.Done())
	for _, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the EndpointSlices of %s did not sync: %w", what, context.Cause(ctx))
		}
	}
	recount() // an empty list calls no handler
	return r, nil
}

// Count is the number of gateway replicas sharing the limits now.
func (r *ReplicaCounter) Count() int { return int(r.n.Load()) }

func (r *ReplicaCounter) set(ready int) {
	n := int64(max(ready, 1))
	if old := r.n.Swap(n); old != n {
		r.log.Info("gateway replicas", "replicas", n, "readyEndpoints", ready, "service", r.what)
	}
}

// readyEndpoints counts the distinct ready endpoints of a Service's slices. A dual-stack Service lists each
// pod once per address family, so endpoints are told apart by their target (the pod), else by address. A
// nil ready condition means ready (the API's rule for an unknown state).
func readyEndpoints(slices []*discoveryv1.EndpointSlice) int {
	seen := map[string]bool{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			var id string
			switch {
			case ep.TargetRef != nil && ep.TargetRef.UID != "":
				id = "uid:" + string(ep.TargetRef.UID)
			case ep.TargetRef != nil:
				id = "ref:" + ep.TargetRef.Namespace + "/" + ep.TargetRef.Name
			case len(ep.Addresses) > 0:
				id = "addr:" + ep.Addresses[0]
			default:
				continue
			}
			seen[id] = true
		}
	}
	return len(seen)
}
