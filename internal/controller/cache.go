package controller

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/sandbox"
)

// CacheOptions trims the manager's cache: of pods it keeps only sandbox pods. Every NetworkPolicy is cached,
// since any of them can undo a sandbox's isolation. Nodes are cached without their image lists, the bulk of a
// Node: only the kubelet port, kernel version and name are read. Pods and policies are cached without their
// managedFields, which nothing reads (a write of an object without them leaves the server's as they are).
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(sandbox.LabelName, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key: cannot fail
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                 {Label: labels.NewSelector().Add(*req), Transform: dropManagedFields},
		&networkingv1.NetworkPolicy{}: {Transform: dropManagedFields},
		&corev1.Node{}:                {Transform: trimNode},
	}}
}

func trimNode(o any) (any, error) {
	if n, ok := o.(*corev1.Node); ok {
		n.Status.Images = nil
		n.ManagedFields = nil
	}
	return o, nil
}

func dropManagedFields(o any) (any, error) {
	if m, ok := o.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}
