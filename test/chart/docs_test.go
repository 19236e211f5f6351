package chart

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Free-form values (maps and lists passed through to Kubernetes): documented as a whole, not key by key.
var freeForm = map[string]bool{"resources": true, "podAnnotations": true, "podLabels": true, "nodeSelector": true,
	"tolerations": true, "affinity": true, "commonLabels": true, "overhead": true, "scheduling": true, "labels": true,
	"extraFrom": true, "extraArgs": true, "imagePullSecrets": true, "sandboxTemplates": true, "tenants": true,
	"isolatingHandlers": true, "digests": true}

// Every value in values.yaml has a row in the docs/install.md values table, and every documented value exists.
func TestValuesAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && !freeForm[k] {
				walk(prefix+k+".", sub)
				continue
			}
			keys = append(keys, prefix+k)
		}
	}
	walk("", values)
	sort.Strings(keys)
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Values")
	if !ok {
		t.Fatal("docs/install.md has no \"## Values\" section")
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
		if !strings.Contains(table, "`"+k+"`") {
			t.Errorf("value %s is not in the docs/install.md values table", k)
		}
	}
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cell := strings.Split(l, "|")[1]
		for _, part := range strings.Split(cell, ",") {
			if k := strings.Trim(strings.TrimSpace(part), "`"); !known[k] {
				t.Errorf("docs/install.md documents %q, which values.yaml does not have", k)
			}
		}
	}
}
