package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// SandboxPoolSpec keeps pre-started, isolated pods of one template and network mode ready to be claimed. Members
// are bare pods, not Sandboxes: the tenant's count/sandboxes quota counts only claims, and the members are
// limited by replicas/maxReplicas here and by the namespace's pods quota.
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicas) || self.maxReplicas >= self.replicas",message="maxReplicas must not be below replicas"
type SandboxPoolSpec struct {
	// TemplateRef names the SandboxTemplate, in the same namespace, the members are made from. A change to the
	// template replaces the unclaimed members; members of an older template generation are never claimed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.templateRef is immutable: make another pool"
	// +required
	TemplateRef TemplateReference `json:"templateRef"`

	// NetworkMode is the network of the members: None or Restricted (with the template's allowlist and
	// egress). Empty takes the template's network. A sandbox claims from this pool only with the same network.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.networkMode is immutable: make another pool"
	// +optional
	NetworkMode NetworkMode `json:"networkMode,omitempty"`

	// Replicas is how many unclaimed members the pool keeps ready; each claim is refilled.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=200
	// +optional
	Replicas int32 `json:"replicas"`

	// MaxReplicas, when set, lets the pool grow with demand: it keeps as many ready members as it had claims in
	// the last five minutes, at least replicas and at most maxReplicas.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=200
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// WhenDrained says what a claim does when no current member is ready: Cold (the default) creates the
	// sandbox's pod as without a pool; Wait keeps the sandbox Pending until a member is ready for it.
	// +kubebuilder:default=Cold
	// +optional
	WhenDrained DrainedPolicy `json:"whenDrained,omitempty"`

	// MinReadyDuringRollout is the floor of a rollout after a template change: a member of the older
	// generation is deleted only while at least this many members (of either generation) stay ready, so a
	// rollout never gives up the pods (and pods quota) the pool holds before their replacements run. Older
	// members are never claimed. Defaults to 0: older members are deleted at once.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=200
	// +optional
	MinReadyDuringRollout int32 `json:"minReadyDuringRollout,omitempty"`
}

// DrainedPolicy is what a claim on a drained pool does.
// +kubebuilder:validation:Enum=Cold;Wait
type DrainedPolicy string

const (
	// DrainedCold creates the sandbox's pod cold.
	DrainedCold DrainedPolicy = "Cold"
	// DrainedWait waits for a ready member.
	DrainedWait DrainedPolicy = "Wait"
)

// Condition types of a SandboxPool.
const (
	// PoolConditionReady is True when the pool has as many ready members of the current generation as it wants.
	PoolConditionReady = "Ready"
	// PoolConditionDrained is True while the pool has no ready member of the current generation: claims fall
	// back to a cold create.
	PoolConditionDrained = "Drained"
)

// SandboxPoolStatus is written by the pool controller only.
type SandboxPoolStatus struct {
	// Desired is how many ready, unclaimed members the pool aims for now (replicas, or the demand within
	// replicas..maxReplicas).
	// +optional
	Desired int32 `json:"desired,omitempty"`

	// Members counts the pool's unclaimed pods of every generation, ready or not.
	// +optional
	Members int32 `json:"members,omitempty"`

	// ReadyMembers counts the unclaimed members of the current generation that are ready: running, isolation
	// proven, claimable.
	// +optional
	ReadyMembers int32 `json:"readyMembers,omitempty"`

	// StaleMembers counts unclaimed members of an older template generation, being replaced.
	// +optional
	StaleMembers int32 `json:"staleMembers,omitempty"`

	// TemplateGeneration is the template's metadata.generation the current members are made from.
	// +optional
	TemplateGeneration int64 `json:"templateGeneration,omitempty"`

	// RecentClaims counts the claims of the last five minutes: the demand maxReplicas follows.
	// +optional
	RecentClaims int32 `json:"recentClaims,omitempty"`

	// Conditions are Ready and Drained.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SandboxPool keeps warm, isolated pods of one template ready, so that a Sandbox naming it (spec.poolRef), or a
// gateway create with its template and network, starts in milliseconds instead of seconds.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxp,categories=airlock
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.templateRef.name`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters: member pods are named after it"
type SandboxPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the pool should keep.
	// +required
	Spec SandboxPoolSpec `json:"spec"`

	// Status is what the pool controller observed.
	// +optional
	Status SandboxPoolStatus `json:"status,omitempty"`
}

// SandboxPoolList is a list of SandboxPools.
// +kubebuilder:object:root=true
type SandboxPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxPool `json:"items"`
}

// PoolReference names a SandboxPool in the Sandbox's namespace.
type PoolReference struct {
	// Name of the SandboxPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// PoolClaimResult says how a Sandbox that named a pool got its pod.
// +kubebuilder:validation:Enum=Warm;Cold
type PoolClaimResult string

const (
	// ClaimWarm: the sandbox adopted a ready pool member.
	ClaimWarm PoolClaimResult = "Warm"
	// ClaimCold: no ready member of the current generation was free, so a pod was created for the sandbox.
	ClaimCold PoolClaimResult = "Cold"
)

// PoolClaimStatus records a Sandbox's claim on a pool.
type PoolClaimStatus struct {
	// Name is the pool.
	// +required
	Name string `json:"name"`
	// Result is Warm (a member was adopted) or Cold (the pool was drained or did not fit; a pod was created).
	// +required
	Result PoolClaimResult `json:"result"`
	// Message says why a claim fell back to a cold create.
	// +optional
	Message string `json:"message,omitempty"`
	// ClaimedAt is when the member was adopted: the sandbox's usage counts from here.
	// +optional
	ClaimedAt *metav1.Time `json:"claimedAt,omitempty"`
	// TemplateGeneration is the template generation the adopted member was made from.
	// +optional
	TemplateGeneration int64 `json:"templateGeneration,omitempty"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &SandboxPool{}, &SandboxPoolList{})
		return nil
	})
}
