package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxSpec describes one disposable, isolated computer. Everything but timeout is fixed at creation,
// because the sandbox's pod cannot change under a running agent.
// +kubebuilder:validation:XValidation:rule="!has(self.idleTimeout) || !has(self.timeout) || duration(self.idleTimeout) <= duration(self.timeout)",message="spec.idleTimeout must not exceed spec.timeout: the hard timeout caps the whole lifetime"
// +kubebuilder:validation:XValidation:rule="has(self.templateRef) != has(self.image)",message="exactly one of spec.templateRef or spec.image must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.poolRef) || has(self.templateRef)",message="spec.poolRef needs spec.templateRef, the pool's template: a cold create falls back to it"
// +kubebuilder:validation:XValidation:rule="has(self.templateRef) == has(oldSelf.templateRef) && has(self.image) == has(oldSelf.image) && has(self.runtimeClassName) == has(oldSelf.runtimeClassName) && has(self.size) == has(oldSelf.size) && has(self.resources) == has(oldSelf.resources) && has(self.network) == has(oldSelf.network) && has(self.env) == has(oldSelf.env) && has(self.labels) == has(oldSelf.labels) && has(self.idleTimeout) == has(oldSelf.idleTimeout) && has(self.poolRef) == has(oldSelf.poolRef)",message="only spec.timeout may be added or changed after creation: templateRef, image, runtimeClassName, size, resources, network, env, labels, idleTimeout and poolRef are fixed"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.timeout) || (has(self.timeout) && duration(self.timeout) >= duration(oldSelf.timeout))",message="spec.timeout may only grow"
type SandboxSpec struct {
	// TemplateRef names the SandboxTemplate, in the same namespace, that supplies the image and defaults.
	// Exactly one of templateRef and image is set.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.templateRef is immutable"
	// +optional
	TemplateRef *TemplateReference `json:"templateRef,omitempty"`

	// Image is the container image to run when no template is used, e.g. localhost/airlock/sandbox-python:0.1.0.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.image is immutable"
	// +optional
	Image string `json:"image,omitempty"`

	// RuntimeClassName selects the isolating runtime. Defaults to the template's, else "gvisor".
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.runtimeClassName is immutable"
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// Size picks CPU, memory and disk: small, medium or large (see docs/sizes.md). Defaults to the template's,
	// else small.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.size is immutable"
	// +optional
	Size Size `json:"size,omitempty"`

	// Resources overrides the requests and limits that size gives.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.resources is immutable"
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Timeout is the sandbox's hard lifetime from creation, e.g. "30m" or "2h". Defaults to the template's
	// defaultTimeout, else 30m. It may be raised while the sandbox runs, never lowered; the template's
	// maxTimeout and the operator's cap (at most 24h) bound it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="spec.timeout must be greater than 0s and at most 24h"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// IdleTimeout expires the sandbox after this long without activity (an exec or a file transfer through the
	// gateway, as recorded in status.lastActivityAt), counted from its container's start or its last activity,
	// whichever is later. The hard timeout still caps the total. Defaults to the template's defaultIdleTimeout,
	// else none; it may not exceed timeout. The gateway records activity at most every
	// --activity-flush-interval (30s), so the idle expiry is precise to that interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="spec.idleTimeout must be greater than 0s and at most 24h"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.idleTimeout is immutable"
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// Network says what the sandbox may reach. Defaults to the template's, else mode None (no network).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.network is immutable"
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// Env sets plain environment variables for every command, after the template's.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.env is immutable"
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []EnvVar `json:"env,omitempty"`

	// WorkingDir is where commands start and where files persist for the sandbox's life: a writable,
	// size-limited volume, also $HOME.
	// +kubebuilder:default=/home/sandbox
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$`
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workingDir is immutable"
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`

	// PoolRef names a SandboxPool, in the same namespace, to claim a warm pod from: the sandbox adopts a ready
	// member instead of waiting for a new pod, and env and labels are applied at the claim. The sandbox's
	// settings must resolve to the pool's (same template and network, no image, runtime, size or resources of
	// its own); when they do not, or no member is ready, a pod is created as without a pool
	// (status.pool.result Cold).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.poolRef is immutable"
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`

	// Labels are copied onto the sandbox's pod. Keys under sandbox.airlock.dev/ are reserved.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('sandbox.airlock.dev/'))",message="spec.labels may not use the reserved prefix sandbox.airlock.dev/"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.labels is immutable"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// TemplateReference names a SandboxTemplate in the Sandbox's namespace.
type TemplateReference struct {
	// Name of the SandboxTemplate.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SandboxPhase is a one-word summary of a sandbox's life; conditions carry the detail.
// +kubebuilder:validation:Enum=Pending;Ready;Expired;Terminating;Failed
type SandboxPhase string

const (
	PhasePending     SandboxPhase = "Pending"
	PhaseReady       SandboxPhase = "Ready"
	PhaseExpired     SandboxPhase = "Expired"
	PhaseTerminating SandboxPhase = "Terminating"
	PhaseFailed      SandboxPhase = "Failed"
)

// Condition types of a Sandbox.
const (
	// ConditionReady is True when the pod runs and its network isolation is proven: commands may be run.
	ConditionReady = "Ready"
	// ConditionNetworkIsolated is True when our NetworkPolicy exists and matches the spec, no other policy
	// selects the pod, and the pod's own probe saw a known-blocked address unreachable.
	ConditionNetworkIsolated = "NetworkIsolated"
	// ConditionExpired is True once the sandbox's hard expiry (reason Expired) or its idle timeout (reason
	// IdleTimeout) has passed.
	ConditionExpired = "Expired"
)

// SandboxStatus is written by the controller, except lastActivityAt, which only the exec gateway writes.
type SandboxStatus struct {
	// Phase summarises the conditions: Pending, Ready, Expired, Terminating or Failed.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`

	// PodName is the sandbox's pod. Once set, it never changes: a lost pod fails the sandbox rather than
	// being replaced by an empty one.
	// +optional
	PodName string `json:"podName,omitempty"`

	// PodIP is the pod's IP address.
	// +optional
	PodIP string `json:"podIP,omitempty"`

	// NodeName is the node the pod runs on: the gateway admits commands by node capacity.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// RuntimeClassName is the runtime class the pod was created with.
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// RuntimeHandler is the handler of that runtime class when the pod was created (e.g. runsc): what the
	// node actually runs, and what the isolation evidence is checked against.
	// +optional
	RuntimeHandler string `json:"runtimeHandler,omitempty"`

	// Isolation is how the pod is really isolated from the node, proven from inside the pod before any
	// command ran: gvisor (gVisor's marker file or its boot lines in the kernel log), kata (a kernel none of the
	// nodes runs: a VM), none (the node's own kernel) or unverified (an isolating handler whose pod found
	// nothing that proves its isolation: refused unless the operator allows it). Empty until proven.
	// +optional
	Isolation Isolation `json:"isolation,omitempty"`

	// IsolationEvidence is what the pod's PID 1 proved, which status.isolation and the
	// NetworkIsolated condition are derived from.
	// +optional
	IsolationEvidence *IsolationEvidence `json:"isolationEvidence,omitempty"`

	// SupervisorKey is the session key the pod's PID 1 attested before any command could run
	// ("ed25519:" + base64): the gateway accepts commands' results and every other answer from the sandbox
	// only over a session with this key's holder (docs/security.md).
	// +optional
	SupervisorKey string `json:"supervisorKey,omitempty"`

	// Image is the image the pod was created with.
	// +optional
	Image string `json:"image,omitempty"`

	// Size is the size the pod was created with.
	// +optional
	Size Size `json:"size,omitempty"`

	// Network is the network the sandbox was created with; its NetworkPolicy is kept to it.
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// MaxTimeout is the longest timeout this sandbox may be extended to, fixed when its pod was created.
	// +optional
	MaxTimeout *metav1.Duration `json:"maxTimeout,omitempty"`

	// StartedAt is when the pod's sandbox container started, or when a warm pool member was claimed; usage
	// counts from here.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// ExpiresAt is the hard expiry: creation time plus the effective timeout. At this time the sandbox is
	// marked Expired and deleted.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// IdleTimeout is the effective idle timeout (spec.idleTimeout or the template's defaultIdleTimeout), fixed
	// when the pod was created. Absent: the sandbox never expires for being idle.
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// LastActivityAt is the latest exec or file transfer the gateway recorded (at most once per
	// --activity-flush-interval per gateway replica). The idle expiry is the later of startedAt and this, plus
	// idleTimeout. Written by the gateway only; the controller only reads it.
	// +optional
	LastActivityAt *metav1.Time `json:"lastActivityAt,omitempty"`

	// Pool records the claim of a sandbox that named a pool: Warm with the time it adopted a member, or Cold.
	// +optional
	Pool *PoolClaimStatus `json:"pool,omitempty"`

	// Usage is what the sandbox has used, recorded on each transition and finally on deletion.
	// +optional
	Usage *SandboxUsage `json:"usage,omitempty"`

	// Conditions are Ready, NetworkIsolated and Expired.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Isolation is how a sandbox's pod is isolated from its node.
// +kubebuilder:validation:Enum=gvisor;kata;none;unverified
type Isolation string

const (
	// IsolationGVisor is gVisor's user-space kernel, proven by its /proc/gvisor/kernel_is_gvisor marker or by
	// its boot lines in the kernel log.
	IsolationGVisor Isolation = "gvisor"
	// IsolationKata is a kernel none of the nodes runs: a lightweight VM such as Kata Containers.
	IsolationKata Isolation = "kata"
	// IsolationNone is the node's own kernel: namespaces and cgroups only, not a boundary for hostile code.
	IsolationNone Isolation = "none"
	// IsolationUnverified is an isolating handler's pod that found nothing proving its isolation, and not the
	// node's own kernel either (e.g. gVisor without its marker file and with its kernel log unreadable).
	IsolationUnverified Isolation = "unverified"
)

// IsolationMethod is the evidence that proved an isolation from inside the pod.
// +kubebuilder:validation:Enum=marker;kernel-log;kernel
type IsolationMethod string

const (
	// MethodMarker is gVisor's marker file /proc/gvisor/kernel_is_gvisor (runsc --gvisor-marker-file).
	MethodMarker IsolationMethod = "marker"
	// MethodKernelLog is gVisor's boot lines in the kernel log, read with syslog(2): a syscall's answer, which
	// nothing in the image can change.
	MethodKernelLog IsolationMethod = "kernel-log"
	// MethodKernel is a kernel release (uname) that none of the nodes runs: a VM's own kernel.
	MethodKernel IsolationMethod = "kernel"
)

// IsolationEvidence is what the sandbox's PID 1 (airlock-init) proved from inside the pod, under the pod's
// runtime, before any command ran, next to what the node reports. The pod's readiness probe passes only then.
type IsolationEvidence struct {
	// Proven is the runtime's isolation as proven from inside: gvisor by gVisor's marker file
	// /proc/gvisor/kernel_is_gvisor or its boot lines in the kernel log, kata (a VM) by a kernel that none of
	// the nodes runs, none when the RuntimeClass promises none (nothing to prove), unverified when the handler
	// promises isolation and nothing proved it (Unverified says why).
	// +optional
	Proven Isolation `json:"proven,omitempty"`
	// Method is the evidence that proved it: marker (gVisor's marker file), kernel-log (gVisor's boot lines in
	// the kernel log, read with syslog(2)) or kernel (a kernel none of the nodes runs). Absent when nothing was
	// to be proven or nothing proved it.
	// +optional
	Method IsolationMethod `json:"method,omitempty"`
	// Unverified says what PID 1 looked for and did not find, when Proven is unverified.
	// +optional
	Unverified string `json:"unverified,omitempty"`
	// PodKernel is the kernel release (uname) PID 1 saw from inside the pod.
	// +optional
	PodKernel string `json:"podKernel,omitempty"`
	// NodeKernel is the kernel of the pod's node (status.nodeInfo.kernelVersion).
	// +optional
	NodeKernel string `json:"nodeKernel,omitempty"`
	// GateTarget is the address the network gate found blocked, as PID 1 attested it: one known to listen
	// (the node's kubelet port, from the Node's status, unless the operator set --gate-target).
	// +optional
	GateTarget string `json:"gateTarget,omitempty"`
	// Gate is how PID 1 saw GateTarget blocked: refused (a reject), timeout (a drop) or prohibited (an ICMP
	// admin-prohibited reject).
	// +optional
	Gate string `json:"gate,omitempty"`
	// ProxyTarget is the egress proxy address the gate reached once GateTarget was blocked: the positive
	// control of a Restricted sandbox with an allowlist, whose policy allows only the proxy.
	// +optional
	ProxyTarget string `json:"proxyTarget,omitempty"`
}

// SandboxUsage is metered usage.
type SandboxUsage struct {
	// SandboxSeconds counts seconds from startedAt to the last transition (or to deletion).
	SandboxSeconds int64 `json:"sandboxSeconds"`
}

// Sandbox is one disposable, isolated computer for an AI agent: a pod under an isolating runtime, denied
// network by default, with a hard expiry. Files persist in spec.workingDir for the sandbox's life.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbx,categories=airlock
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.status.runtimeClassName`
// +kubebuilder:printcolumn:name="Isolation",type=string,JSONPath=`.status.isolation`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it is used as a label value"
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the sandbox should be.
	// +required
	Spec SandboxSpec `json:"spec"`

	// Status is what the controller observed.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}
