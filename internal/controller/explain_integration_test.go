package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestIntegrationEveryFieldIsDocumented checks the served CRD schemas: every field has a description, and
// `kubectl explain` (the project-built kubectl) shows one for each field of sandbox.spec.
func TestIntegrationEveryFieldIsDocumented(t *testing.T) {
	_, c := startEnv(t)
	for _, name := range []string{"sandboxes.sandbox.airlock.dev", "sandboxtemplates.sandbox.airlock.dev"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("getting CRD %s: %v", name, err)
		}
		schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, top := range []string{"spec", "status"} {
			if p, ok := schema.Properties[top]; ok {
				checkDescribed(t, name+"."+top, p)
			}
		}
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	// The API server publishes a new CRD's schema to discovery and OpenAPI a moment after it is established.
	var out []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", "sandbox.spec").CombinedOutput()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("kubectl explain sandbox.spec: %v\n%s", err, out)
	}
	text := string(out)
	for _, field := range []string{"templateRef", "image", "runtimeClassName", "size", "resources", "timeout", "network", "env", "workingDir", "labels"} {
		i := strings.Index(text, "\n  "+field+"\t")
		if i < 0 {
			t.Errorf("kubectl explain sandbox.spec does not list %s:\n%s", field, text)
			continue
		}
		// The line after the field's name holds its description.
		rest := strings.SplitN(text[i+1:], "\n", 3)
		if len(rest) < 2 || strings.TrimSpace(rest[1]) == "" {
			t.Errorf("kubectl explain shows no description for %s", field)
		}
	}
}

func checkDescribed(t *testing.T, path string, p apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if strings.TrimSpace(p.Description) == "" {
		t.Errorf("%s has no description", path)
	}
	for name, child := range p.Properties {
		if strings.HasPrefix(path, "sandboxes.sandbox.airlock.dev.spec.resources") || strings.Contains(path, ".conditions") {
			continue // core types documented upstream
		}
		checkDescribed(t, path+"."+name, child)
	}
	if p.Items != nil && p.Items.Schema != nil && !strings.Contains(path, "conditions") {
		for name, child := range p.Items.Schema.Properties {
			checkDescribed(t, path+"[]."+name, child)
		}
	}
}
