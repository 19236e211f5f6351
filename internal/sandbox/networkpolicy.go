package sandbox

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// DNS is where a Restricted sandbox may resolve names: the cluster DNS pods, and nothing else on port 53.
var DNS = struct{ Namespace, PodLabelKey, PodLabelValue string }{"kube-system", "k8s-app", "kube-dns"}

// BuildNetworkPolicy returns the sandbox's policy: it selects only the sandbox's pod and denies all ingress
// and egress; Restricted mode adds exactly the listed egress and DNS to the cluster DNS pods. It must exist
// before the pod starts, because connections opened before a policy applies survive it.
func BuildNetworkPolicy(sbx *airlockv1.Sandbox, network airlockv1.NetworkSpec) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      sbx.Name,
			Namespace: sbx.Namespace,
			Labels:    map[string]string{LabelName: sbx.Name, LabelManagedBy: ManagedByValue},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(sbx.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	if network.Mode != airlockv1.NetworkRestricted {
		return np
	}
	np.Spec.Egress = append(np.Spec.Egress, dnsRule())
	for _, e := range network.Egress {
		rule := networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: e.CIDR}}},
		}
		for _, p := range e.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{
				Protocol: ptr.To(proto),
				Port:     ptr.To(intstr.FromInt32(p.Port)),
			})
		}
		np.Spec.Egress = append(np.Spec.Egress, rule)
	}
	return np
}

func dnsRule() networkingv1.NetworkPolicyEgressRule {
	port := intstr.FromInt32(53)
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": DNS.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{DNS.PodLabelKey: DNS.PodLabelValue}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr.To(corev1.ProtocolUDP), Port: &port},
			{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port},
		},
	}
}
