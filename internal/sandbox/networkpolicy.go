package sandbox

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// EgressProxy is how Restricted sandboxes with an allowlist reach Airlock's egress proxy, read from its Service.
type EgressProxy struct {
	// Address is the Service's ClusterIP and port (host:port): the sandbox's HTTP_PROXY. An IP, since the
	// sandbox has no DNS.
	Address string
	// Namespace and PodLabels select the proxy's pods, and PodPort is the port they listen on: the one
	// destination the sandbox's NetworkPolicy allows for them.
	Namespace string
	PodLabels map[string]string
	PodPort   int32
}

// NeedsProxy reports whether a network reaches hosts through the egress proxy.
func NeedsProxy(n airlockv1.NetworkSpec) bool {
	return n.Mode == airlockv1.NetworkRestricted && len(n.Allow) > 0
}

// BuildNetworkPolicy returns the sandbox's policy: it selects only the sandbox's pod and denies all ingress
// and egress; Restricted mode adds egress to the egress proxy's pods (when the sandbox has an allowlist) and
// exactly the listed CIDR egress. There is no DNS rule: the proxy resolves names. The policy must exist before
// the pod starts, because connections opened before a policy applies survive it.
func BuildNetworkPolicy(sbx *airlockv1.Sandbox, network airlockv1.NetworkSpec, proxy *EgressProxy) *networkingv1.NetworkPolicy {
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
	if NeedsProxy(network) && proxy != nil {
		np.Spec.Egress = append(np.Spec.Egress, proxyRule(*proxy))
	}
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

func proxyRule(p EgressProxy) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": p.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: p.PodLabels},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p.PodPort))}},
	}
}
