package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// ErrNotTenant is returned for a valid key whose namespace is not (or no longer) a tenant: it has no label
// LabelTenant=true, or it is gone. Unlike ErrUnauthenticated, a new key would not help; an administrator must.
var ErrNotTenant = errors.New("the API key's namespace is not an Airlock tenant")

// tenants knows which namespaces are tenants from a watch of those labelled LabelTenant=true. The label is
// what makes a namespace a tenant (the gateway may exec there), so a key whose namespace loses it stops
// working within the watch delay: the API server sends a watch deletion when an object stops matching the
// selector.
type tenants struct {
	informer cache.SharedIndexInformer
	lister   listerscorev1.NamespaceLister
}

func newTenants(cs kubernetes.Interface) *tenants {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelTenant + "=true" }))
	inf := f.Core().V1().Namespaces()
	return &tenants{informer: inf.Informer(), lister: inf.Lister()}
}

func (t *tenants) run(ctx context.Context) error {
	go t.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced) {
		return fmt.Errorf("tenant namespaces: cache did not sync (the gateway needs namespaces get/list/watch): %w", context.Cause(ctx))
	}
	return nil
}

// check returns nil if namespace is a tenant, else an error wrapping ErrNotTenant that says how to fix it.
func (t *tenants) check(namespace string) error {
	ns, err := t.lister.Get(namespace)
	if err == nil && ns.Labels[LabelTenant] == "true" {
		return nil
	}
	return fmt.Errorf("%w: namespace %s has no label %s=true (an administrator can make it one with `airlock tenant create %s --adopt`)",
		ErrNotTenant, namespace, LabelTenant, namespace)
}
