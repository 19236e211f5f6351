package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

const (
	// LabelPool marks the pods a SandboxPool made, and their policies, with the pool's name. A claim leaves it:
	// the pool's members are the pods it controls.
	LabelPool = "sandbox.airlock.dev/pool"
	// LabelPod is set on pool members, with the pod's own name, and is what a member's NetworkPolicy selects.
	LabelPod = "sandbox.airlock.dev/pod"
	// AnnotationTemplateGeneration is the template generation a member was made from.
	AnnotationTemplateGeneration = "sandbox.airlock.dev/template-generation"
	// AnnotationMemberHash is a hash of the member's pod spec: a claim takes only a member whose pod is the
	// one its own settings would have made.
	AnnotationMemberHash = "sandbox.airlock.dev/member-hash"
	// AnnotationClaimedBy is set by the claim, with the claiming Sandbox's UID.
	AnnotationClaimedBy = "sandbox.airlock.dev/claimed-by"
	// AnnotationClaimedAt is when the claim's pass began: a claim whose status write was lost is recovered
	// with its time.
	AnnotationClaimedAt = "sandbox.airlock.dev/claimed-at"
)

// PoolSandbox is the sandbox a pool's members are built as: the pool's template and network mode, no
// per-claim settings (env and labels are bound at the claim). Its name is the member's.
func PoolSandbox(pool *airlockv1.SandboxPool, member string) *airlockv1.Sandbox {
	sbx := &airlockv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: member, Namespace: pool.Namespace},
		Spec:       airlockv1.SandboxSpec{TemplateRef: pool.Spec.TemplateRef.DeepCopy()},
	}
	if pool.Spec.NetworkMode != "" {
		sbx.Spec.Network = &airlockv1.NetworkSpec{Mode: pool.Spec.NetworkMode}
	}
	return sbx
}

// ClaimShape is the sandbox as a pool member would have been built for it: without the settings a claim binds
// late (env and labels), which are all that may differ between a claim and the member it takes.
func ClaimShape(sbx *airlockv1.Sandbox) *airlockv1.Sandbox {
	c := sbx.DeepCopy()
	c.Spec.Env, c.Spec.Labels = nil, nil
	return c
}

// MemberHash identifies the pod a resolved sandbox gets, whatever its name: two sandboxes with the same hash
// get the same pod spec.
func MemberHash(r Resolved, o PodOptions) string {
	pod := BuildPod(&airlockv1.Sandbox{}, r, o)
	b, err := json.Marshal(struct {
		Spec        corev1.PodSpec
		Annotations map[string]string
	}{pod.Spec, pod.Annotations})
	if err != nil {
		return "" // a PodSpec always encodes; an empty hash matches no member
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// BuildMember returns a pool member's pod: the pod BuildPod makes for the pool's sandbox, marked with the pool,
// its own name (what its policy selects), the template generation and the spec hash.
func BuildMember(pool *airlockv1.SandboxPool, name string, r Resolved, o PodOptions, templateGeneration int64) *corev1.Pod {
	pod := BuildPod(PoolSandbox(pool, name), r, o)
	pod.Labels[LabelPool] = pool.Name
	pod.Labels[LabelPod] = name
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationTemplateGeneration] = strconv.FormatInt(templateGeneration, 10)
	pod.Annotations[AnnotationMemberHash] = MemberHash(r, o)
	return pod
}

// BuildMemberPolicy returns a member's deny-all policy, named after the member and selecting it by LabelPod,
// which a claim leaves alone: the pod is never without its policy, before or after the claim.
func BuildMemberPolicy(pool *airlockv1.SandboxPool, name string, r Resolved) *networkingv1.NetworkPolicy {
	np := BuildNetworkPolicy(PoolSandbox(pool, name), r.Network, r.EgressProxy)
	np.Labels[LabelPool] = pool.Name
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{LabelPod: name}}
	return np
}

// ClaimedPolicy is the policy a sandbox that claimed a member keeps: the member's (its name and selector), with
// the rules its own network asks for. Labelled with the sandbox for when it must be made again.
func ClaimedPolicy(sbx *airlockv1.Sandbox, member string, network airlockv1.NetworkSpec, proxy *EgressProxy) *networkingv1.NetworkPolicy {
	np := BuildNetworkPolicy(sbx, network, proxy)
	np.Name = member
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{LabelPod: member}}
	return np
}

// MemberGeneration is the template generation a member was made from, 0 if unknown.
func MemberGeneration(pod *corev1.Pod) int64 {
	g, err := strconv.ParseInt(pod.Annotations[AnnotationTemplateGeneration], 10, 64)
	if err != nil {
		return 0
	}
	return g
}
