// Package v1alpha1 holds the Airlock API: Sandbox and SandboxTemplate in group sandbox.airlock.dev.
// +kubebuilder:object:generate=true
// +groupName=sandbox.airlock.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Airlock object.
	GroupVersion = schema.GroupVersion{Group: "sandbox.airlock.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Airlock types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Airlock types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
