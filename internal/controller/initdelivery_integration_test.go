package controller

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"airlock.dev/airlock/internal/sandbox"
)

// envOffersImageVolumes: envtest's API server is new enough for image volumes (its one node reports a kubelet
// of the same version and containerd 2.4).
func envOffersImageVolumes() bool {
	return version.MustParseGeneric(envServerVersion).AtLeast(version.MustParseGeneric("1.35.0"))
}

// copiesInit tells a pod that gets airlock-init from the copying init container, and checks it has exactly
// one of the two deliveries.
func copiesInit(g Gomega, pod *corev1.Pod) bool {
	copying := len(pod.Spec.InitContainers) == 1 && pod.Spec.InitContainers[0].Name == sandbox.InitCopyContainer
	imageVolume := len(pod.Spec.Volumes) > 0 && pod.Spec.Volumes[0].Image != nil
	g.Expect(copying).NotTo(Equal(imageVolume), "one delivery of airlock-init: init containers %+v, volumes %+v", pod.Spec.InitContainers, pod.Spec.Volumes)
	return copying
}

// airlock-init reaches a pod as an image volume only where the API server and every node offer them: a node
// whose containerd is older than 2.1 joins, and the next sandbox gets the copy instead (no pod that would not
// start); the operator's --init-delivery=copy wins everywhere. On an API server older than 1.35 (make
// test-compat) every pod gets the copy. Fails with gatedPodOptions judging the server's version alone: checked.
func TestIntegrationInitDeliveryFollowsTheCluster(t *testing.T) {
	_, c := startEnv(t)
	stop := startManager(t, managerOptions{})
	ctx, g := context.Background(), NewWithT(t)
	ns := newNamespace(t, c)

	g.Expect(c.Create(ctx, makeSandbox(ns, "current").image("busybox").obj())).To(Succeed())
	pod, _ := getPodAndPolicy(t, c, ns, "current")
	g.Expect(copiesInit(g, pod)).To(Equal(!envOffersImageVolumes()), "API server %s", envServerVersion)

	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "containerd-1-7"}}
	g.Expect(c.Create(ctx, old)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), old) })
	old.Status.NodeInfo = corev1.NodeSystemInfo{KernelVersion: envNodeKernel, KubeletVersion: envServerVersion, ContainerRuntimeVersion: "containerd://1.7.27"}
	old.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	g.Expect(c.Status().Update(ctx, old)).To(Succeed())
	attempt := 0
	g.Eventually(func(g Gomega) {
		// A new sandbox each time: the manager's cache may not have seen the node for the first.
		attempt++
		name := fmt.Sprintf("after-old-node-%d", attempt)
		g.Expect(c.Create(ctx, makeSandbox(ns, name).image("busybox").obj())).To(Succeed())
		pod, _ := getPodAndPolicy(t, c, ns, name)
		g.Expect(copiesInit(g, pod)).To(BeTrue(), "a node's containerd 1.7 does not serve image volumes")
	}).WithTimeout(waitLong).Should(Succeed())
	g.Expect(c.Delete(ctx, old)).To(Succeed())

	stop()
	startManager(t, managerOptions{initDelivery: sandbox.InitDeliveryCopy})
	g.Expect(c.Create(ctx, makeSandbox(ns, "told-to-copy").image("busybox").obj())).To(Succeed())
	pod, _ = getPodAndPolicy(t, c, ns, "told-to-copy")
	g.Expect(copiesInit(g, pod)).To(BeTrue())
}
