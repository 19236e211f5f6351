package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// Size names a fixed amount of CPU, memory and disk for a sandbox. The table lives in internal/sandbox/sizes.go
// and docs/sizes.md.
// +kubebuilder:validation:Enum=small;medium;large
type Size string

const (
	SizeSmall  Size = "small"
	SizeMedium Size = "medium"
	SizeLarge  Size = "large"
)

// NetworkMode says what a sandbox may reach.
// +kubebuilder:validation:Enum=None;Restricted
type NetworkMode string

const (
	// NetworkNone denies all ingress and egress.
	NetworkNone NetworkMode = "None"
	// NetworkRestricted denies all ingress and allows only the listed hosts (through Airlock's egress proxy)
	// and the listed CIDR egress; there is no DNS: the proxy resolves names.
	NetworkRestricted NetworkMode = "Restricted"
)

// NetworkSpec says what a sandbox may reach over the network. Ingress is always denied.
// +kubebuilder:validation:XValidation:rule="self.mode == 'Restricted' || !has(self.egress) || size(self.egress) == 0",message="network.egress may only be set when network.mode is Restricted"
type NetworkSpec struct {
	// Mode is None (no network at all, the default) or Restricted (only the allowed hosts and the listed egress).
	// +kubebuilder:default=None
	// +optional
	Mode NetworkMode `json:"mode,omitempty"`

	// Allow lists the hosts a Restricted sandbox may reach through Airlock's egress proxy (HTTP and HTTPS, with
	// HTTP_PROXY and HTTPS_PROXY set in the sandbox): exact names such as pypi.org and wildcards such as
	// *.pythonhosted.org (names below it), on ports 80 and 443 unless an entry names its port
	// (registry.example:8443). A sandbox made from a template may narrow the template's list but not widen it;
	// Restricted without a list takes the template's. A template whose mode is None may list hosts too: they
	// are what its sandboxes that ask for Restricted get. A Sandbox's own list needs mode Restricted.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=259
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]{1,5})?$`
	// +listType=atomic
	// +optional
	Allow []string `json:"allow,omitempty"`

	// Egress lists the CIDRs a Restricted sandbox may open connections to directly, for what needs raw TCP.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Egress []EgressRule `json:"egress,omitempty"`
}

// EgressRule allows connections to one CIDR, optionally only on some ports.
type EgressRule struct {
	// CIDR is the destination network, e.g. 203.0.113.0/24 or 198.51.100.7/32.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be a CIDR such as 203.0.113.0/24"
	// +kubebuilder:validation:MaxLength=43
	// +required
	CIDR string `json:"cidr"`

	// Ports limits the rule to these ports; empty means every port.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Ports []EgressPort `json:"ports,omitempty"`
}

// EgressPort is one destination port.
type EgressPort struct {
	// Port is the destination port number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	Port int32 `json:"port"`

	// Protocol is TCP (the default), UDP or SCTP.
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	// +kubebuilder:default=TCP
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// EnvVar is a plain environment variable. References to Secrets or ConfigMaps are deliberately not supported:
// a sandbox runs untrusted code and holds no credentials.
type EnvVar struct {
	// Name of the variable; must be a C identifier. Names starting with AIRLOCK_ are reserved for Airlock's own
	// variables, which the sandbox's PID 1 (airlock-init) reads; so are the Go runtime's GODEBUG, GOGC,
	// GOMAXPROCS, GOMEMLIMIT and GOTRACEBACK, which would change how airlock-init runs (an exec request's env
	// may set those for one command).
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('AIRLOCK_') && !(self in ['GODEBUG', 'GOGC', 'GOMAXPROCS', 'GOMEMLIMIT', 'GOTRACEBACK'])",messageExpression="self.startsWith('AIRLOCK_') ? self + ' is reserved: names starting with AIRLOCK_ are the variables of Airlock itself, which its supervisor (the sandbox PID 1) reads for the network gate, the memory guard and the process limit' : self + ' is reserved in the sandbox env: the Go runtime of airlock-init, the sandbox PID 1, reads it; set it per command in the env of an exec request instead'"
	// +kubebuilder:validation:MaxLength=256
	// +required
	Name string `json:"name"`

	// Value of the variable.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Value string `json:"value,omitempty"`
}

// SizeResources overrides the resources of each size for sandboxes made from a template.
type SizeResources struct {
	// Small overrides the resources of size small.
	// +optional
	Small *corev1.ResourceRequirements `json:"small,omitempty"`
	// Medium overrides the resources of size medium.
	// +optional
	Medium *corev1.ResourceRequirements `json:"medium,omitempty"`
	// Large overrides the resources of size large.
	// +optional
	Large *corev1.ResourceRequirements `json:"large,omitempty"`
}
