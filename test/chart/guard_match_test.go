package chart

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// guardCalledFor tells whether the API server would call the exec guard for username's exec into a pod: its
// matchConditions evaluated by the API server's own webhook code (matcher, CEL environment), not a copy.
func guardCalledFor(t *testing.T, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, username string) bool {
	t.Helper()
	if len(vwc.Webhooks) != 1 {
		t.Fatalf("%s has %d webhooks", vwc.Name, len(vwc.Webhooks))
	}
	compiler := cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	matcher := webhook.NewValidatingWebhookAccessor("test", vwc.Name, &vwc.Webhooks[0]).GetCompiledMatcher(compiler)
	kind := schema.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}
	opts := &corev1.PodExecOptions{Container: "sandbox", Command: []string{"true"}}
	attrs := admission.NewAttributesRecord(opts, nil, kind, "team-a", "some-pod", corev1.SchemeGroupVersion.WithResource("pods"),
		"exec", admission.Connect, nil, false, &user.DefaultInfo{Name: username})
	res := matcher.Match(context.Background(), &admission.VersionedAttributes{Attributes: attrs, VersionedKind: kind,
		VersionedObject: admission.NewLazyObject(opts)}, nil, nil)
	if res.Error != nil {
		t.Fatalf("%s: matchConditions for %s: %v", vwc.Name, username, res.Error)
	}
	return res.Matches
}
