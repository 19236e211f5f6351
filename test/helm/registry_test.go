//go:build registry

// The install path of a cluster that has a registry and no `make images`: the release (`make release`) is
// pushed to a real registry on loopback, the node's containerd pulls every image from it (localhost:PORT,
// plain HTTP, which containerd allows for localhost without configuration), and Helm installs the pushed chart
// by its oci:// reference. Behind the `registry` build tag because it needs dist/ and the registry binary:
// run it with `make test-release-cluster` on a running local cluster.

package helm

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/testutil/ociregistry"
)

// pushedRelease is the part of dist/digests.json this test reads.
type pushedRelease struct {
	Registry string `json:"registry"`
	Version  string `json:"version"`
	Images   map[string]struct {
		Digest string `json:"digest"`
	} `json:"images"`
}

func TestHelmInstallFromARegistry(t *testing.T) {
	kubeconfig, helm, kubectl, registryBin := os.Getenv("KUBECONFIG"), os.Getenv("AIRLOCK_E2E_HELM"), os.Getenv("AIRLOCK_E2E_KUBECTL"), os.Getenv("AIRLOCK_REGISTRY")
	if kubeconfig == "" || helm == "" || kubectl == "" || registryBin == "" {
		t.Fatal("KUBECONFIG, AIRLOCK_E2E_HELM, AIRLOCK_E2E_KUBECTL and AIRLOCK_REGISTRY must be set: run 'make test-release-cluster'")
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = airlockv1.AddToScheme(scheme)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// The node is this machine: its containerd reaches the loopback registry as localhost:PORT. A new port
	// each run is a new image name, so containerd pulls (resolves the manifest) even if it has the blobs. Pulled
	// images are left on the node: removing one through CRI removes every name of its image, and the pushed
	// sandbox image can be the very one `make images` imported.
	reg := ociregistry.Start(t, registryBin)
	registry := "localhost:" + strings.TrimPrefix(reg.Host, "127.0.0.1:") + "/airlock"
	push := exec.Command("make", "-s", "push", "REGISTRY="+registry)
	push.Dir = filepath.Join("..", "..")
	if out, err := push.CombinedOutput(); err != nil {
		t.Fatalf("make push REGISTRY=%s: %v\n%s", registry, err, out)
	}
	rel := readPushed(t, filepath.Join("..", "..", "dist", "digests.json"))

	start := time.Now()
	run(t, helm, "install", release, "oci://"+registry+"/charts/airlock", "--version", rel.Version, "--plain-http",
		"-n", namespace, "--create-namespace", "-f", "../../charts/airlock/ci/local-cluster-values.yaml", "--wait", "--timeout", "5m")
	t.Logf("helm install oci://%s/charts/airlock ready in %s", registry, time.Since(start).Round(time.Millisecond))
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_ = exec.Command(helm, "uninstall", release, "-n", namespace, "--wait").Run()
		}
	})
	checkPulledFrom(t, c, namespace, rel, "manager", "gateway", "egress-proxy")

	key, _, err := admin.CreateKey(ctx, c, keyNamespace, tenant, "registry-e2e")
	if err != nil {
		t.Fatalf("creating key: %v", err)
	}
	base := portForward(t, kubectl, kubeconfig, "app.kubernetes.io/component=gateway")
	status, created := call(t, base, key, "POST", "/v1/sandboxes", map[string]any{"timeout_minutes": 10})
	id, _ := created["id"].(string)
	if status != http.StatusCreated || created["status"] != "ready" || id == "" {
		t.Fatalf("create through the gateway installed from the registry: %d %v", status, created)
	}
	// The default template's image is the pushed sandbox image, pulled by digest: what it promises runs.
	status, res := call(t, base, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "node --version && python3 --version && npm --version"})
	if out, _ := res["stdout"].(string); status != http.StatusOK || res["exit_code"] != float64(0) || !strings.HasPrefix(out, "v22.") || !strings.Contains(out, "Python 3.11") {
		t.Errorf("runtimes in the default sandbox: %d %v", status, res)
	}
	checkPulledFrom(t, c, tenant, rel, "sandbox-python")
	status, tools := call(t, base, key, "GET", "/v1/tools", nil)
	if b, _ := json.Marshal(tools); status != http.StatusOK || !strings.Contains(string(b), "Node.js 22") || !strings.Contains(string(b), "Python 3.11") {
		t.Errorf("GET /v1/tools does not state the image's runtimes: %d %s", status, b)
	}
	if status, _ := call(t, base, key, "DELETE", "/v1/sandboxes/"+id, nil); status != http.StatusOK {
		t.Errorf("delete: %d", status)
	}
	waitEmpty(t, c, tenant, 2*time.Minute)

	run(t, helm, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
	uninstalled = true
}

func readPushed(t *testing.T, path string) pushedRelease {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rel pushedRelease
	if err := json.Unmarshal(b, &rel); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rel
}

// checkPulledFrom: the pods in ns run each named image as REGISTRY/NAME@DIGEST, and the kubelet reported
// pulling it (an event "Successfully pulled image"), not finding it imported.
func checkPulledFrom(t *testing.T, c client.Client, ns string, rel pushedRelease, names ...string) {
	t.Helper()
	var pods corev1.PodList
	var events corev1.EventList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		ref := rel.Registry + "/" + name + "@" + rel.Images[name].Digest
		running := false
		for _, p := range pods.Items {
			for _, ctr := range p.Spec.Containers {
				running = running || ctr.Image == ref
			}
		}
		pulled := false
		for _, e := range events.Items {
			pulled = pulled || (e.Reason == "Pulled" && strings.Contains(e.Message, "Successfully pulled image \""+ref+"\""))
		}
		if !running || !pulled {
			t.Errorf("%s: a pod in %s runs %s: %v; the kubelet reported pulling it: %v", name, ns, ref, running, pulled)
		}
	}
}
