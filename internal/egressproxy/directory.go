package egressproxy

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/allowlist"
	"airlock.dev/airlock/internal/sandbox"
)

// PodIPIndex is the cache index of sandbox pods by IP that the Directory looks connections up in.
const PodIPIndex = "status.podIP"

// IndexPodIP is the index function for PodIPIndex: a pod's IPs while it may hold them.
func IndexPodIP(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return ips
}

// KubeDirectory finds sandboxes in a cache of sandbox pods (indexed by PodIPIndex) and Sandboxes. A caller is
// a sandbox only if its source IP belongs to exactly one live pod that a Sandbox controls, and that Sandbox
// records the pod as its own: what the sandbox itself could claim (headers, credentials) plays no part.
type KubeDirectory struct {
	Reader client.Reader
}

// Lookup implements Directory.
func (d *KubeDirectory) Lookup(ip netip.Addr) (Client, error) {
	ctx := context.Background()
	var pods corev1.PodList
	if err := d.Reader.List(ctx, &pods, client.MatchingFields{PodIPIndex: ip.String()}); err != nil {
		return Client{}, fmt.Errorf("looking up %s: %w", ip, err)
	}
	if len(pods.Items) != 1 {
		return Client{}, fmt.Errorf("%s is not the address of one sandbox pod (%d found)", ip, len(pods.Items))
	}
	pod := &pods.Items[0]
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Sandbox" || owner.APIVersion != airlockv1.GroupVersion.String() {
		return Client{}, fmt.Errorf("pod %s/%s at %s is not a sandbox's", pod.Namespace, pod.Name, ip)
	}
	sbx := &airlockv1.Sandbox{}
	if err := d.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, sbx); err != nil {
		return Client{}, fmt.Errorf("sandbox %s/%s of pod %s: %w", pod.Namespace, owner.Name, pod.Name, err)
	}
	if sbx.UID != owner.UID || sbx.Status.PodName != pod.Name {
		return Client{}, fmt.Errorf("pod %s/%s is not sandbox %s's current pod", pod.Namespace, pod.Name, sbx.Name)
	}
	n := sbx.Status.Network
	if n == nil || !sandbox.NeedsProxy(*n) {
		return Client{}, fmt.Errorf("sandbox %s/%s has no allowlist (network.allow)", sbx.Namespace, sbx.Name)
	}
	allow, err := allowlist.Parse(n.Allow)
	if err != nil {
		return Client{}, fmt.Errorf("sandbox %s/%s: %w", sbx.Namespace, sbx.Name, err)
	}
	return Client{Namespace: sbx.Namespace, Name: sbx.Name, UID: string(sbx.UID), Allow: allow}, nil
}
