package controller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// finalizerPolicyFile is the install's MutatingAdmissionPolicy (the chart renders the same objects).
var finalizerPolicyFile = filepath.Join("..", "..", "config", "admission", "sandbox-finalizer.yaml")

// readManifest decodes a multi-document YAML file.
func readManifest(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// installFinalizerPolicy creates the install's finalizer policy under the given name; namespace, when set,
// limits its binding to that namespace (so that other tests keep exercising the manager's own patch). It
// returns once a Sandbox created there comes back from the API server with the finalizer.
func installFinalizerPolicy(tb testing.TB, c client.Client, name, namespace string) {
	tb.Helper()
	ctx := context.Background()
	for _, u := range readManifest(tb, finalizerPolicyFile) {
		u.SetName(name)
		if u.GetKind() == "MutatingAdmissionPolicyBinding" {
			if err := unstructured.SetNestedField(u.Object, name, "spec", "policyName"); err != nil {
				tb.Fatal(err)
			}
			if namespace != "" {
				sel := map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": namespace}}
				if err := unstructured.SetNestedField(u.Object, sel, "spec", "matchResources", "namespaceSelector"); err != nil {
					tb.Fatal(err)
				}
			}
		}
		if err := c.Create(ctx, u); err != nil {
			tb.Fatalf("creating %s %s: %v", u.GetKind(), name, err)
		}
		tb.Cleanup(func() { _ = c.Delete(context.Background(), u) })
	}
	probeNS := namespace
	if probeNS == "" {
		probeNS = newNamespace(tb, c)
	}
	// The API server loads policies asynchronously (and right after envtest starts, the client may not map
	// the CRD's kind yet).
	var err error
	for end := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		probe := makeSandbox(probeNS, "").image("img:1").obj()
		probe.GenerateName = "policy-probe-"
		if err = c.Create(ctx, probe, client.DryRunAll); err == nil && slices.Contains(probe.Finalizers, Finalizer) {
			return
		}
		if time.Now().After(end) {
			tb.Fatalf("the finalizer policy has no effect after a minute (last error: %v)", err)
		}
	}
}

// The install's MutatingAdmissionPolicy gives a Sandbox the cleanup finalizer as it is created, with nothing
// else changed, and only on create: a finalizer someone removed is not put back. Without the policy (the other
// tests), the manager adds it itself.
//
// Below Kubernetes 1.36 (make test-compat) the API server serves no MutatingAdmissionPolicy v1 and the chart
// renders none (test/chart): there the manager's own patch is what gives the finalizer.
func TestIntegrationFinalizerPolicy(t *testing.T) {
	cfg, c := startEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, c)
	if !servesMutatingAdmissionPolicy(t, cfg) {
		startManager(t, managerOptions{})
		g := NewWithT(t)
		g.Expect(c.Create(ctx, makeSandbox(ns, "s").image("img:1").obj())).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(getSandbox(t, c, ns, "s").Finalizers).To(ContainElement(Finalizer))
		}).WithTimeout(waitLong).Should(Succeed())
		return
	}
	installFinalizerPolicy(t, c, "test-sandbox-finalizer", ns)

	sbx := makeSandbox(ns, "s").image("img:1").obj()
	if err := c.Create(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sbx.Finalizers, []string{Finalizer}) || sbx.Spec.Image != "img:1" {
		t.Fatalf("created: finalizers %v, spec %+v", sbx.Finalizers, sbx.Spec)
	}
	// A user's own finalizer stays, ours is added.
	other := makeSandbox(ns, "o").image("img:1").obj()
	other.Finalizers = []string{"example.com/keep"}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(other.Finalizers, "example.com/keep") || !slices.Contains(other.Finalizers, Finalizer) {
		t.Fatalf("with a finalizer of its own: %v", other.Finalizers)
	}
	// Not on update: removing ours sticks (and deletion then needs no manager).
	sbx.Finalizers = nil
	if err := c.Update(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	if len(sbx.Finalizers) != 0 {
		t.Fatalf("after removing it: %v", sbx.Finalizers)
	}
	if err := c.Delete(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sbx), &airlockv1.Sandbox{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted without its finalizer: %v", err)
	}
	other.Finalizers = nil
	if err := c.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
}

// servesMutatingAdmissionPolicy tells whether the API server serves admissionregistration.k8s.io/v1
// MutatingAdmissionPolicy, as the chart asks (.Capabilities.APIVersions).
func servesMutatingAdmissionPolicy(tb testing.TB, cfg *rest.Config) bool {
	tb.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	list, err := dc.ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		tb.Fatalf("discovering admissionregistration.k8s.io/v1: %v", err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == "MutatingAdmissionPolicy" })
}
