package sandbox

import (
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PolicyMatches tells whether an existing policy still says what we want. Only the spec matters: an edit to it
// by anyone could re-open the sandbox.
func PolicyMatches(existing, want *networkingv1.NetworkPolicy) bool {
	return equality.Semantic.DeepEqual(normalize(existing.Spec), normalize(want.Spec))
}

// OtherSelectingPolicies returns, sorted, the names of policies other than ours that select a pod with these
// labels. NetworkPolicies are additive: any other policy that selects the pod may allow traffic ours denies,
// so while one exists the sandbox is not isolated.
func OtherSelectingPolicies(podLabels map[string]string, ours string, policies []networkingv1.NetworkPolicy) ([]string, error) {
	var names []string
	for i := range policies {
		p := &policies[i]
		if p.Name == ours {
			continue
		}
		if len(p.Spec.PodSelector.MatchExpressions) == 0 {
			// Fast path for the common case (every sandbox's own policy): a plain label match, no parsing.
			if matchesLabels(p.Spec.PodSelector.MatchLabels, podLabels) {
				names = append(names, p.Name)
			}
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("network policy %s has an invalid pod selector: %w", p.Name, err)
		}
		if sel.Matches(labels.Set(podLabels)) {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// AnyName is SelectedName's answer for a policy that may select pods of any sandbox. A label value cannot be
// "*", so it never collides with a sandbox's name.
const AnyName = "*"

// SelectedName is the sandbox name (label LabelName) a policy's pod selector requires, or AnyName when it
// requires none. Only policies of that name or AnyName can select a sandbox's pod: an index on it lets the
// isolation check look at a few policies instead of every policy in the namespace.
func SelectedName(p *networkingv1.NetworkPolicy) string {
	if v, ok := p.Spec.PodSelector.MatchLabels[LabelName]; ok {
		return v
	}
	return AnyName
}

// normalize treats nil and empty rule lists alike, as the API server may return either.
func normalize(s networkingv1.NetworkPolicySpec) networkingv1.NetworkPolicySpec {
	s = *s.DeepCopy()
	if len(s.Ingress) == 0 {
		s.Ingress = nil
	}
	if len(s.Egress) == 0 {
		s.Egress = nil
	}
	return s
}

// matchesLabels reports whether every required label is present with its value; an empty set selects all.
func matchesLabels(required, podLabels map[string]string) bool {
	for k, v := range required {
		if got, ok := podLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
