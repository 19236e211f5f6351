package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The API server itself classifies the gateway's requests with config/gateway/flowcontrol.yaml: its short
// requests go to the gateway's FlowSchema, another ServiceAccount's do not, and an exec is a long-running
// request that API Priority and Fairness does not see at all (no classification header).
func TestIntegrationFlowSchemaCoversTheGatewaysShortRequests(t *testing.T) {
	ctx := context.Background()
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "gateway", "flowcontrol.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("the API server refuses %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, u) })
	}
	var fs flowcontrolv1.FlowSchema
	if err := c.Get(ctx, client.ObjectKey{Name: "airlock-gateway"}, &fs); err != nil {
		t.Fatal(err)
	}
	// flowSchema is the UID of the FlowSchema that classified a GET of path by the ServiceAccount, "" if none did.
	flowSchema := func(sa, path string) string {
		t.Helper()
		imp := rest.CopyConfig(cfg)
		imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:airlock-system:" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:airlock-system", "system:authenticated"}}
		hc, err := rest.HTTPClientFor(imp)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(strings.TrimSuffix(imp.Host, "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
	}
	short := map[string]string{
		"sandbox list": "/apis/sandbox.airlock.dev/v1alpha1/namespaces/t1/sandboxes",
		"sandbox get":  "/apis/sandbox.airlock.dev/v1alpha1/namespaces/t1/sandboxes/s",
		"status":       "/apis/sandbox.airlock.dev/v1alpha1/namespaces/t1/sandboxes/s/status",
		"pod get":      "/api/v1/namespaces/t1/pods/s",
		"key list":     "/api/v1/namespaces/airlock-system/secrets",
		"slices list":  "/apis/discovery.k8s.io/v1/namespaces/airlock-system/endpointslices",
		"namespaces":   "/api/v1/namespaces",
		"discovery":    "/apis",
		"group":        "/apis/sandbox.airlock.dev/v1alpha1",
		"version":      "/version",
	}
	// The API server applies a new FlowSchema within a moment, not at once.
	waitFor(t, 10*time.Second, func() bool { return flowSchema("airlock-gateway", short["sandbox list"]) == string(fs.UID) })
	for what, path := range short {
		if got := flowSchema("airlock-gateway", path); got != string(fs.UID) {
			t.Errorf("gateway %s: FlowSchema %q, want the gateway's %s", what, got, fs.UID)
		}
		if got := flowSchema("someone-else", path); got == string(fs.UID) || got == "" {
			t.Errorf("another ServiceAccount's %s: FlowSchema %q, want another one", what, got)
		}
	}
	if got := flowSchema("airlock-gateway", "/api/v1/namespaces/t1/pods/s/exec?command=true&stdout=true"); got != "" {
		t.Errorf("exec classified by FlowSchema %q: it is long-running, which APF does not limit", got)
	}
}
