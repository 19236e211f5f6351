package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// A claim whose cached copy of a member is older than the API server's (a kubelet status update since) reads
// it again and takes it if it is still the pool's and running; one another claim took is left alone.
func TestTakeRetriesAStaleCopyOnlyWhileUnclaimed(t *testing.T) {
	ctx := context.Background()
	pool := &airlockv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pool-uid"}}
	member := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-abcde", UID: "pod-uid",
				Labels:      map[string]string{sandbox.LabelPool: "p", sandbox.LabelName: "p-abcde"},
				Annotations: map[string]string{},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: airlockv1.GroupVersion.String(), Kind: "SandboxPool",
					Name: "p", UID: pool.UID, Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				ContainerStatuses: []corev1.ContainerStatus{{Name: sandbox.ContainerName, Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		}
	}
	sbx := func(name string) *airlockv1.Sandbox {
		return &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "uid-" + k8stypes.UID(name)}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(member()).Build()
	claimer := &PoolClaimer{Client: c, APIReader: c, Scheme: scheme}
	cached := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p-abcde"}, cached); err != nil {
		t.Fatal(err)
	}
	// The kubelet updates the pod after the cache's copy was taken.
	live := cached.DeepCopy()
	live.Status.PodIP = "10.0.0.9"
	if err := c.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	won, err := claimer.take(ctx, sbx("a"), cached.DeepCopy(), time.Now())
	if err != nil || !won {
		t.Fatalf("stale copy of a free member: won %v, %v", won, err)
	}
	// Now it is a's: b, with the same stale copy, must not get it.
	won, err = claimer.take(ctx, sbx("b"), cached.DeepCopy(), time.Now())
	if err != nil || won {
		t.Fatalf("member already claimed: won %v, %v", won, err)
	}
	got := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p-abcde"}, got); err != nil {
		t.Fatal(err)
	}
	// A claim moves the controller and leaves the labels: a relabel costs the node's policy agent a full resync.
	if metav1.GetControllerOf(got).Name != "a" || got.Annotations[sandbox.AnnotationClaimedBy] != "uid-a" ||
		got.Labels[sandbox.LabelName] != "p-abcde" || got.Labels[sandbox.LabelPool] != "p" {
		t.Fatalf("claimed pod %+v", got.ObjectMeta)
	}
}
