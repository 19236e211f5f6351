package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxTemplateSpec is what sandboxes made from this template get unless they say otherwise. A sandbox
// copies what it needs when its pod is created: editing a template never changes running sandboxes.
// +kubebuilder:validation:XValidation:rule="!has(self.defaultTimeout) || !has(self.maxTimeout) || duration(self.defaultTimeout) <= duration(self.maxTimeout)",message="defaultTimeout must not exceed maxTimeout"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultIdleTimeout) || !has(self.defaultTimeout) || duration(self.defaultIdleTimeout) <= duration(self.defaultTimeout)",message="defaultIdleTimeout must not exceed defaultTimeout"
type SandboxTemplateSpec struct {
	// Image is the container image, e.g. localhost/airlock/sandbox-python:0.1.0. Any image works: Airlock
	// brings its own init process and needs no daemon inside.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Image string `json:"image"`

	// Init is where the sandbox's PID 1, airlock-init, comes from. Volume (the default): Airlock's init image,
	// mounted read-only as an image volume, so that any image works. Image: the image itself holds
	// airlock-init at /airlock/bin/airlock-init, of the manager's release (Airlock's own sandbox images do);
	// the pod then mounts no volume, which spares the kubelet's volume check (300 ms steps) before it starts
	// the pod. A sandbox whose image lacks it, or holds one of another release, fails with the reason in its
	// Ready condition.
	// +kubebuilder:validation:Enum=Volume;Image
	// +optional
	Init InitSource `json:"init,omitempty"`

	// RuntimeClassName is the default runtime class; "gvisor" when empty.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// Size is the default size; small when empty.
	// +optional
	Size Size `json:"size,omitempty"`

	// Resources overrides the requests and limits of each size.
	// +optional
	Resources *SizeResources `json:"resources,omitempty"`

	// DefaultTimeout is the timeout of sandboxes that set none; 30m when empty.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="defaultTimeout must be greater than 0s and at most 24h"
	// +optional
	DefaultTimeout *metav1.Duration `json:"defaultTimeout,omitempty"`

	// MaxTimeout caps the timeout of sandboxes made from this template, also when they are extended.
	// The operator's own cap applies too.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="maxTimeout must be greater than 0s and at most 24h"
	// +optional
	MaxTimeout *metav1.Duration `json:"maxTimeout,omitempty"`

	// DefaultIdleTimeout is the idle timeout of sandboxes that set none: they expire after this long without an
	// exec or file transfer. None when empty.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('24h')",message="defaultIdleTimeout must be greater than 0s and at most 24h"
	// +optional
	DefaultIdleTimeout *metav1.Duration `json:"defaultIdleTimeout,omitempty"`

	// Network is the default network of sandboxes that set none.
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// Env is set for every command; a sandbox's own env wins on the same name.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []EnvVar `json:"env,omitempty"`

	// RunAsRoot lets commands run as root inside the sandbox. It is honoured only under a RuntimeClass whose
	// handler the operator lists as isolating (runsc, kata*): the pod then cannot pass the restricted Pod Security
	// Standard, so its namespace must allow baseline. Default false: commands run as uid 1000.
	// +optional
	RunAsRoot bool `json:"runAsRoot,omitempty"`

	// OutputLimitBytes is the default per-stream output budget the exec gateway keeps for each command.
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=16777216
	// +optional
	OutputLimitBytes *int64 `json:"outputLimitBytes,omitempty"`
}

// InitSource is where a sandbox's airlock-init comes from.
type InitSource string

const (
	// InitFromVolume mounts Airlock's init image as a read-only image volume: any image works.
	InitFromVolume InitSource = "Volume"
	// InitFromImage runs the airlock-init the sandbox's image holds at /airlock/bin/airlock-init.
	InitFromImage InitSource = "Image"
)

// SandboxTemplate is a reusable recipe for sandboxes: image, runtime, size, limits and network defaults.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=sbxt,categories=airlock
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtimeClassName`
// +kubebuilder:printcolumn:name="Init",type=string,JSONPath=`.spec.init`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the template.
	// +required
	Spec SandboxTemplateSpec `json:"spec"`
}

// SandboxTemplateList is a list of SandboxTemplates.
// +kubebuilder:object:root=true
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}
