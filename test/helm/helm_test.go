// Package helm installs Airlock with its Helm chart into the local cluster, with the manager and gateway
// running in-cluster, drives the agent loop through the in-cluster gateway Service, and uninstalls it.
// hack/e2e.sh runs it after the main end-to-end suite (whose out-of-cluster manager must not run alongside).
package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/testutil/child"
)

const (
	release      = "airlock"
	namespace    = "airlock-system"
	keyNamespace = "airlock-keys" // gateway.keyNamespace's default
	tenant       = "team-a"       // from charts/airlock/ci/local-cluster-values.yaml
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// connectUnlisted asks the sandbox's HTTPS_PROXY for a tunnel to a host no allowlist names and prints the
// status line.
const connectUnlisted = `python3 -c 'import os, socket, urllib.parse
u = urllib.parse.urlparse(os.environ["HTTPS_PROXY"])
s = socket.create_connection((u.hostname, u.port), 5)
s.sendall(b"CONNECT unlisted.invalid:443 HTTP/1.1\r\n\r\n")
print(s.makefile("rb").readline().decode().strip())'`

func TestHelmInstallServesAgentsAndUninstallsCleanly(t *testing.T) {
	kubeconfig, helm, kubectl := os.Getenv("KUBECONFIG"), os.Getenv("AIRLOCK_E2E_HELM"), os.Getenv("AIRLOCK_E2E_KUBECTL")
	if kubeconfig == "" || helm == "" || kubectl == "" {
		t.Fatal("KUBECONFIG, AIRLOCK_E2E_HELM and AIRLOCK_E2E_KUBECTL must be set: run 'make test-e2e'")
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

	start := time.Now()
	run(t, helm, "upgrade", "--install", release, "../../charts/airlock", "-n", namespace, "--create-namespace",
		"-f", "../../charts/airlock/ci/local-cluster-values.yaml", "--wait", "--timeout", "5m")
	t.Logf("helm install ready in %s", time.Since(start).Round(time.Millisecond))
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_ = exec.Command(helm, "uninstall", release, "-n", namespace, "--wait").Run()
		}
	})

	key, _, err := admin.CreateKey(ctx, c, keyNamespace, tenant, "helm-e2e")
	if err != nil {
		t.Fatalf("creating key: %v", err)
	}
	checkInstalledRBAC(t, c)
	checkSandboxOutsideATenant(t, c)
	checkGatewayMetricsNeedAToken(t, kubectl, kubeconfig)
	base := portForward(t, kubectl, kubeconfig, "app.kubernetes.io/component=gateway")

	status, created := call(t, base, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
	if status != http.StatusCreated || created["status"] != "ready" {
		t.Fatalf("create through the in-cluster gateway: %d %v", status, created)
	}
	id, ok := created["id"].(string)
	if !ok {
		t.Fatalf("create answered without an id: %v", created)
	}
	status, res := call(t, base, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": `python3 -c 'import sys; print("ok"); sys.exit(3)'`})
	if status != http.StatusOK || res["exit_code"] != float64(3) || res["stdout"] != "ok\n" {
		t.Fatalf("exec through the in-cluster gateway: %d %v", status, res)
	}
	if status, _ := call(t, base, key, "DELETE", "/v1/sandboxes/"+id, nil); status != http.StatusOK {
		t.Fatalf("delete: %d", status)
	}
	// network "restricted" on the default template: its allowlist, through the in-cluster egress proxy, which
	// the sandbox's gate reached before it was Ready. A host not on the list is refused by the proxy before any
	// lookup, so nothing leaves the machine.
	status, restricted := call(t, base, key, "POST", "/v1/sandboxes", map[string]any{"network": "restricted", "timeout_minutes": 10})
	rid, _ := restricted["id"].(string)
	if status != http.StatusCreated || restricted["status"] != "ready" || rid == "" {
		t.Fatalf("restricted create through the in-cluster gateway: %d %v", status, restricted)
	}
	status, res = call(t, base, key, "POST", "/v1/sandboxes/"+rid+"/exec", map[string]any{"command": connectUnlisted})
	if out, _ := res["stdout"].(string); status != http.StatusOK || !strings.Contains(out, "403 airlock egress proxy") || !strings.Contains(out, "unlisted.invalid:443 is not on sandbox") {
		t.Fatalf("CONNECT to an unlisted host through the in-cluster proxy: %d %v", status, res)
	}
	if status, _ := call(t, base, key, "DELETE", "/v1/sandboxes/"+rid, nil); status != http.StatusOK {
		t.Fatalf("delete: %d", status)
	}
	waitEmpty(t, c, tenant, 2*time.Minute)

	run(t, helm, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
	uninstalled = true
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods left in %s after uninstall", len(pods.Items), namespace)
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitEmpty(t, c, tenant, 10*time.Second)
}

// waitEmpty waits until the namespace holds no sandboxes, pods or network policies of sandboxes.
func waitEmpty(t *testing.T, c client.Client, ns string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var sbx airlockv1.SandboxList
		var pods corev1.PodList
		var nps networkingv1.NetworkPolicyList
		sel := client.HasLabels{"sandbox.airlock.dev/name"}
		err := c.List(context.Background(), &sbx, client.InNamespace(ns))
		if err == nil {
			err = c.List(context.Background(), &pods, client.InNamespace(ns), sel)
		}
		if err == nil {
			err = c.List(context.Background(), &nps, client.InNamespace(ns), sel)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(sbx.Items)+len(pods.Items)+len(nps.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d sandboxes, %d pods, %d policies left", ns, len(sbx.Items), len(pods.Items), len(nps.Items))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// portForward forwards a free loopback port to the Service labelled selector and returns its base URL
// (http://127.0.0.1:PORT), once the forward accepts connections.
func portForward(t *testing.T, kubectl, kubeconfig, selector string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	svc := strings.TrimSpace(run(t, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "get", "svc",
		"-l", selector, "-o", "jsonpath={.items[0].metadata.name}"))
	svcPort := strings.TrimSpace(run(t, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "get", "svc", svc,
		"-o", "jsonpath={.spec.ports[0].port}"))
	cmd := child.DieWithParent(exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "port-forward", "--address", "127.0.0.1",
		"svc/"+svc, fmt.Sprintf("%d:%s", port, svcPort)))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			return base
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("port-forward to %s did not come up within 30s", svc)
	return ""
}

func call(t *testing.T, base, key, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d: not JSON: %.200s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}
