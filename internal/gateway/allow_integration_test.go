package gateway

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// TestIntegrationCreateNarrowsTheAllowlist: allow within the template's list is kept on the Sandbox; beyond
// it, or without network restricted, the create is refused with a 400 that names the field.
func TestIntegrationCreateNarrowsTheAllowlist(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	ctx := context.Background()
	var tmpl airlockv1.SandboxTemplate
	if err := g.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "python-node"}, &tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Network = &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted, Allow: []string{"pypi.org", "*.pythonhosted.org"}}
	if err := g.c.Update(ctx, &tmpl); err != nil {
		t.Fatal(err)
	}
	code, body := g.do(t, key, "POST", "/v1/sandboxes", map[string]any{"network": "restricted", "allow": []string{"files.pythonhosted.org"}, "wait": false})
	if code != http.StatusCreated {
		t.Fatalf("narrowed: %d %v", code, body)
	}
	var sb airlockv1.Sandbox
	if err := g.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: body["id"].(string)}, &sb); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sb.Spec.Network.Allow, []string{"files.pythonhosted.org"}) {
		t.Errorf("spec.network %+v", sb.Spec.Network)
	}
	for _, req := range []map[string]any{
		{"network": "restricted", "allow": []string{"pypi.org", "evil.example"}},
		{"allow": []string{"pypi.org"}},
		{"network": "restricted", "allow": []string{"10.0.0.1"}},
	} {
		code, body := g.do(t, key, "POST", "/v1/sandboxes", req)
		if e, _ := body["error"].(map[string]any); code != http.StatusBadRequest || e["field"] != "allow" {
			t.Errorf("%v: %d %v, want a 400 on allow", req, code, body)
		}
	}
}
