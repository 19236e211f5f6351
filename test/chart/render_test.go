// Package chart tests the Helm chart in charts/airlock by rendering it with the real helm binary and checking
// the parsed objects, and checks that the kustomize tree in config/ deploys the same things.
//
// Run with `make test-chart` (it builds helm into the machine-wide cache and sets AIRLOCK_HELM).
package chart

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeconv "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// repoRoot is the repository root, found from this file's location.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "airlock") }

// helmBinary is $AIRLOCK_HELM, else the Makefile's cached build; tests skip only when neither exists.
func helmBinary(t testing.TB) string {
	t.Helper()
	if h := os.Getenv("AIRLOCK_HELM"); h != "" {
		return h
	}
	home, _ := os.UserHomeDir()
	cache := os.Getenv("AIRLOCK_CACHE")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "airlock")
	}
	version := readVar(t, filepath.Join(repoRoot(t), "hack", "versions.env"), "HELM_VERSION=")
	h := filepath.Join(cache, "tools", "helm-"+version)
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("helm not built (%s): run `make test-chart`", h)
	}
	return h
}

// readVar returns the rest of the first line of file that starts with prefix.
func readVar(t testing.TB, file, prefix string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("%s: no line starting with %q", file, prefix)
	return ""
}

const (
	releaseNamespace = "airlock-system"
	// keyNamespace holds the API key Secrets (gateway.keyNamespace's default, config/gateway's).
	keyNamespace = "airlock-keys"
)

// helmTemplate renders the chart (or dir) with extra helm arguments and returns stdout, stderr and the error.
func helmTemplate(t testing.TB, dir, release string, args ...string) (string, string, error) {
	t.Helper()
	// As on the project's cluster (Kubernetes 1.37), which serves MutatingAdmissionPolicy v1 (GA in 1.36);
	// helm template's built-in list of APIs predates it.
	base := []string{"template", release, dir, "--namespace", releaseNamespace, "--api-versions", mutatingPolicyAPI}
	cmd := exec.Command(helmBinary(t), append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

const mutatingPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// objects is a rendered manifest, parsed.
type objects []*unstructured.Unstructured

// render renders the chart with default values plus args and fails the test on any error.
func render(t testing.TB, args ...string) objects {
	t.Helper()
	out, stderr, err := helmTemplate(t, chartDir(t), "airlock", args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr)
	}
	return parse(t, out)
}

func parse(t testing.TB, manifest string) objects {
	t.Helper()
	var objs objects
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("parsing rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// kind returns the objects of one kind.
func (o objects) kind(k string) objects {
	var out objects
	for _, x := range o {
		if x.GetKind() == k {
			out = append(out, x)
		}
	}
	return out
}

// get returns the object of kind, namespace and name, or nil.
func (o objects) get(kind, namespace, name string) *unstructured.Unstructured {
	for _, x := range o {
		if x.GetKind() == kind && x.GetNamespace() == namespace && x.GetName() == name {
			return x
		}
	}
	return nil
}

func (o objects) must(t testing.TB, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	x := o.get(kind, namespace, name)
	if x == nil {
		t.Fatalf("no %s %s/%s rendered; have: %s", kind, namespace, name, o.names())
	}
	return x
}

func (o objects) names() string {
	var s []string
	for _, x := range o {
		s = append(s, x.GetKind()+" "+x.GetNamespace()+"/"+x.GetName())
	}
	return strings.Join(s, ", ")
}

// into converts an unstructured object into a typed one.
func into[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtimeconv.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// readYAML parses one YAML file of the repository.
func readYAML(t testing.TB, rel string) objects {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(b))
}
