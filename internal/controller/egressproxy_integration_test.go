package controller

import (
	"context"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// TestIntegrationAllowlistReachesOnlyTheProxy: a Restricted sandbox with an allowlist waits for the egress
// proxy's Service, then gets a policy that allows only the proxy's pods, HTTP_PROXY by the Service's IP, a
// gate that must reach the proxy, and the template's list in its status; NetworkIsolated holds only with a
// verdict that reached the proxy. A list that widens the template's is refused.
func TestIntegrationAllowlistReachesOnlyTheProxy(t *testing.T) {
	_, c := startEnv(t)
	ctx, g := context.Background(), NewWithT(t)
	proxyNS := newNamespace(t, c)
	startManager(t, managerOptions{egressProxy: types.NamespacedName{Namespace: proxyNS, Name: "egress-proxy"}})
	ns := newNamespace(t, c)
	tpl := makeTemplate(ns, "py", "img:1").obj()
	tpl.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: []string{"pypi.org", "*.pythonhosted.org"}}
	g.Expect(c.Create(ctx, tpl)).To(Succeed())

	restricted := airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted}
	g.Expect(c.Create(ctx, makeSandbox(ns, "s").template("py").network(restricted).obj())).To(Succeed())
	g.Eventually(func() string { return condition(getSandbox(t, c, ns, "s"), airlockv1.ConditionReady) }).
		WithTimeout(waitLong).Should(Equal("False/" + ReasonEgressProxyUnavailable))

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: proxyNS, Name: "egress-proxy"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "airlock-egress-proxy"},
			Ports: []corev1.ServicePort{{Name: "proxy", Port: 3128, TargetPort: intstr.FromInt32(8080)}}},
	}
	g.Expect(c.Create(ctx, svc)).To(Succeed())
	pod, np := getPodAndPolicy(t, c, ns, "s")
	g.Expect(np.Spec.Egress).To(HaveLen(1))
	peer := np.Spec.Egress[0].To[0]
	g.Expect(peer.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": proxyNS}))
	g.Expect(peer.PodSelector.MatchLabels).To(Equal(svc.Spec.Selector))
	g.Expect(np.Spec.Egress[0].Ports[0].Port.IntVal).To(Equal(int32(8080)))
	addr := svc.Spec.ClusterIP + ":3128"
	g.Expect(pod.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://" + addr}))
	g.Expect(slices.Contains(pod.Spec.Containers[0].Command, sandbox.ProxyTargetFlag+addr)).To(BeTrue())

	g.Expect(c.Create(ctx, makeSandbox(ns, "p").template("py").network(restricted).obj())).To(Succeed())
	pod2, _ := getPodAndPolicy(t, c, ns, "p")
	markPodRunning(t, c, pod2, 0)
	g.Eventually(func() airlockv1.SandboxPhase { return getSandbox(t, c, ns, "p").Status.Phase }).
		WithTimeout(waitLong).Should(Equal(airlockv1.PhaseReady))
	st := getSandbox(t, c, ns, "p").Status
	g.Expect(st.Network.Allow).To(Equal([]string{"pypi.org", "*.pythonhosted.org"}))
	g.Expect(st.IsolationEvidence.ProxyTarget).To(Equal(addr))

	wide := restricted
	wide.Allow = []string{"pypi.org", "evil.example"}
	g.Expect(c.Create(ctx, makeSandbox(ns, "w").template("py").network(wide).obj())).To(Succeed())
	g.Eventually(func() string { return condition(getSandbox(t, c, ns, "w"), airlockv1.ConditionReady) }).
		WithTimeout(waitLong).Should(Equal("False/" + ReasonInvalid))
}
