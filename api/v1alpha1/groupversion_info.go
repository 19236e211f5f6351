// Package v1alpha1 holds the Airlock API: Sandbox and SandboxTemplate in group sandbox.airlock.dev.
// +kubebuilder:object:generate=true
// +groupName=sandbox.airlock.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every Airlock object.
	GroupVersion = schema.GroupVersion{Group: "sandbox.airlock.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Airlock types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Airlock types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Sandbox{}, &SandboxList{}, &SandboxTemplate{}, &SandboxTemplateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
