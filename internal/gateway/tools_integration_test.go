package gateway

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// GET /v1/tools describes the tools for the named template: its annotation, its network mode.
func TestIntegrationTools(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 5)
	tmpl := &airlockv1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns, Annotations: map[string]string{AnnotationInstalled: "Python 3.12 with pandas"}},
		Spec:       airlockv1.SandboxTemplateSpec{Image: "img", Network: &airlockv1.NetworkSpec{Mode: airlockv1.NetworkRestricted}},
	}
	if err := g.c.Create(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	code, body := g.do(t, key, "GET", "/v1/tools?template=data&format=openai", nil)
	tools, _ := body["tools"].([]any)
	if code != 200 || len(tools) != 2 || body["template"] != "data" {
		t.Fatalf("tools: %d %v", code, body)
	}
	fn, _ := tools[0].(map[string]any)["function"].(map[string]any)
	desc, _ := fn["description"].(string)
	for _, want := range []string{"Python 3.12 with pandas", "restricted", "/home/sandbox", "60000 ms", "Stdin is closed"} {
		if !strings.Contains(desc, want) {
			t.Errorf("description lacks %q: %s", want, desc)
		}
	}
	// The default template has no annotation and no network: no claim about the image, and "no network".
	code, body = g.do(t, key, "GET", "/v1/tools", nil)
	tools, _ = body["tools"].([]any)
	if code != 200 || len(tools) != 2 || body["format"] != "anthropic" {
		t.Fatalf("default: %d %v", code, body)
	}
	desc, _ = tools[1].(map[string]any)["description"].(string)
	if tools[1].(map[string]any)["input_schema"] == nil || strings.Contains(desc, "Installed:") || !strings.Contains(desc, "no network access") {
		t.Errorf("default template's run_python: %v", tools[1])
	}
	if code, body := g.do(t, key, "GET", "/v1/tools?format=vercel", nil); code != 400 || errField(body) != "format" {
		t.Errorf("bad format: %d %v", code, body)
	}
	if code, body := g.do(t, key, "GET", "/v1/tools?template=nope", nil); code != 404 || errField(body) != "template" {
		t.Errorf("missing template: %d %v", code, body)
	}
	if code, _ := g.do(t, "", "GET", "/v1/tools", nil); code != 401 {
		t.Errorf("no key: %d", code)
	}
}
