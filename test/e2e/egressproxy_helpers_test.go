package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/testutil/child"
)

// The egress proxy runs as a pod, as the chart installs it: sandboxes reach it by its Service's ClusterIP
// through a policy that selects its pods, and it reaches the package stand-ins from the pod network, the one
// network the containment routes let reach the test hosts. The manager (out of cluster) is always started with
// --egress-proxy-service naming it; tests that need it deploy it.
const (
	egressProxyNS   = "airlock-e2e-egress-proxy"
	egressProxyName = "egress-proxy"
	egressProxyPort = 3128

	// The package index stand-ins: one netns host, reached by these names only through the proxy's hosts list.
	pkgIP       = "203.0.113.20"
	pkgHostIP   = "203.0.113.21" // the host's end of the veth
	pkgNetns    = "airlock-e2e-pkg"
	pkgHostVeth = "airlock-e2e-ph"
	pkgNsVeth   = "airlock-e2e-pn"
	pypiHost    = "pypi.airlock-e2e.test"
	npmHost     = "npm.airlock-e2e.test"
	// privateHost is on allowlists but resolves to the API server's service IP: the proxy must refuse it.
	privateHost = "private.airlock-e2e.test"
	demoPackage = "airlock-e2e-demo"
)

var egressProxyImage = os.Getenv("AIRLOCK_E2E_EGRESS_PROXY_IMAGE")

// egressProxyArgs is the proxy's command line in the e2e: names resolve only from --hosts (no DNS query ever
// leaves), and 100 concurrent downloads from one sandbox fit under the connection limit.
func egressProxyArgs() []string {
	return []string{
		"--hosts=" + strings.Join([]string{pypiHost + "=" + pkgIP, npmHost + "=" + pkgIP, privateHost + "=10.96.0.1"}, ","),
		"--system-resolver=false",
		"--blocked-cidrs=" + podCIDR + "," + nodeIP + "/32",
		"--max-connections-per-sandbox=128",
		"--shutdown-grace=2s",
	}
}

// deployEgressProxy installs the proxy (ServiceAccount, RBAC, Deployment, Service) and waits until it serves;
// cleanup removes it all. It returns the Service's ClusterIP.
func deployEgressProxy(t *testing.T) string {
	t.Helper()
	if egressProxyImage == "" {
		t.Fatal("AIRLOCK_E2E_EGRESS_PROXY_IMAGE is not set: run the end-to-end tests with 'make test-e2e'")
	}
	ctx := context.Background()
	labels := map[string]string{"app.kubernetes.io/name": "airlock-e2e-egress-proxy"}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: egressProxyNS, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted"}}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: egressProxyNS},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"sandbox.airlock.dev"}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: egressProxyNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: egressProxyNS},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: egressProxyNS, Name: egressProxyName}}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: egressProxyNS, Name: egressProxyName}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: egressProxyNS, Name: egressProxyName},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: egressProxyName,
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{
					Name: "egress-proxy", Image: egressProxyImage, ImagePullPolicy: corev1.PullNever, Args: egressProxyArgs(),
					Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: egressProxyPort}, {Name: "metrics", ContainerPort: 9090}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/readyz", Port: intstr.FromString("metrics")}}, PeriodSeconds: 1},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, ReadOnlyRootFilesystem: ptr.To(true)},
				}},
			}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: egressProxyNS, Name: egressProxyName},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "proxy", Port: egressProxyPort,
			TargetPort: intstr.FromInt32(egressProxyPort)}}}}
	objs := []client.Object{ns, role, binding, sa, dep, svc}
	t.Cleanup(func() {
		for i := len(objs) - 1; i >= 0; i-- {
			_ = k8s.Delete(context.Background(), objs[i])
		}
		eventually(t, 2*time.Minute, "the egress proxy's namespace is gone", func() error {
			if err := k8s.Get(context.Background(), client.ObjectKey{Name: egressProxyNS}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	})
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating the egress proxy's %T %s: %v", o, o.GetName(), err)
		}
	}
	waitProxyServing(t)
	return svc.Spec.ClusterIP
}

// waitProxyServing waits until the proxy's Deployment has a ready pod, and returns that pod.
func waitProxyServing(t *testing.T) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	eventually(t, readyTimeout, "the egress proxy is ready", func() error {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(egressProxyNS)); err != nil {
			return err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready = p
					return nil
				}
			}
		}
		return fmt.Errorf("%d pods, none ready", len(pods.Items))
	})
	return ready
}

// startPackageHosts creates the netns host at pkgIP serving, over plain HTTP on port 80, a PyPI "simple" index
// with one small wheel, an npm registry document with one tarball, and a large file for download tests. Only
// pod traffic is routed to it (the containment table), as in startTestHosts; cleanup undoes exactly that.
func startPackageHosts(t *testing.T) {
	t.Helper()
	if podRouteTable == "" || podCIDR == "" {
		t.Fatal("AIRLOCK_E2E_POD_ROUTE_TABLE and AIRLOCK_E2E_POD_CIDR must be set: run 'make test-e2e'")
	}
	root := t.TempDir()
	writePackages(t, root)
	var undo []func()
	t.Cleanup(func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	})
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	runUndo := func(do, un []string) {
		run(do...)
		undo = append(undo, func() { _ = exec.Command(un[0], un[1:]...).Run() })
	}
	if v, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(v)) == "0" {
		runUndo([]string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}, []string{"sysctl", "-qw", "net.ipv4.ip_forward=0"})
	}
	_ = exec.Command("ip", "link", "del", pkgHostVeth).Run()
	_ = exec.Command("ip", "netns", "del", pkgNetns).Run()
	runUndo([]string{"ip", "netns", "add", pkgNetns}, []string{"ip", "netns", "del", pkgNetns})
	runUndo([]string{"ip", "link", "add", pkgHostVeth, "type", "veth", "peer", "name", pkgNsVeth, "netns", pkgNetns},
		[]string{"ip", "link", "del", pkgHostVeth})
	run("ip", "addr", "add", pkgHostIP+"/32", "dev", pkgHostVeth)
	run("ip", "link", "set", pkgHostVeth, "up")
	run("ip", "-n", pkgNetns, "addr", "add", pkgIP+"/32", "dev", pkgNsVeth)
	run("ip", "-n", pkgNetns, "link", "set", "lo", "up")
	run("ip", "-n", pkgNetns, "link", "set", pkgNsVeth, "up")
	run("ip", "-n", pkgNetns, "route", "add", pkgHostIP+"/32", "dev", pkgNsVeth)
	run("ip", "-n", pkgNetns, "route", "add", podCIDR, "via", pkgHostIP, "dev", pkgNsVeth)
	runUndo([]string{"ip", "route", "add", pkgIP + "/32", "dev", pkgHostVeth, "table", podRouteTable},
		[]string{"ip", "route", "del", pkgIP + "/32", "dev", pkgHostVeth, "table", podRouteTable})
	server := child.DieWithParent(exec.Command("ip", "netns", "exec", pkgNetns, "python3", "-m", "http.server", "80",
		"--bind", pkgIP, "--directory", root))
	if err := server.Start(); err != nil {
		t.Fatalf("starting the package hosts' HTTP server: %v", err)
	}
	undo = append(undo, func() { _ = server.Process.Kill(); _ = server.Wait() })
	eventually(t, 10*time.Second, "package hosts answer", func() error {
		out, err := exec.Command("ip", "netns", "exec", pkgNetns, "python3", "-c",
			fmt.Sprintf("import urllib.request; urllib.request.urlopen('http://%s/simple/%s/', timeout=1).read()", pkgIP, demoPackage)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// demoValue is what the demo package's module says, in both Python and JavaScript.
const demoValue = "installed through the airlock egress proxy"

// writePackages lays out the stand-in indexes under root: /simple/<pkg>/ with one wheel under /packages/, the
// npm document /<pkg> with its tarball under /tarballs/, and /big (64 MiB) for download tests.
func writePackages(t *testing.T, root string) {
	t.Helper()
	wheelName := "airlock_e2e_demo-1.0-py3-none-any.whl"
	wheel := buildWheel(t)
	sum := sha256.Sum256(wheel)
	mustWrite(t, filepath.Join(root, "packages", wheelName), wheel)
	mustWrite(t, filepath.Join(root, "simple", demoPackage, "index.html"), []byte(fmt.Sprintf(
		"<!DOCTYPE html><html><body><a href=\"../../packages/%s#sha256=%s\">%s</a></body></html>\n", wheelName, hex.EncodeToString(sum[:]), wheelName)))

	tgz := buildNpmTarball(t)
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	tarball := fmt.Sprintf("http://%s/tarballs/%s-1.0.0.tgz", npmHost, demoPackage)
	mustWrite(t, filepath.Join(root, "tarballs", demoPackage+"-1.0.0.tgz"), tgz)
	doc, err := json.Marshal(map[string]any{
		"name": demoPackage, "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{
			"name": demoPackage, "version": "1.0.0", "main": "index.js",
			"dist": map[string]string{"tarball": tarball, "shasum": hex.EncodeToString(sha1sum[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:])},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, demoPackage), doc)
	mustWrite(t, filepath.Join(root, "big"), make([]byte, 64<<20))
	mustWrite(t, filepath.Join(root, "medium"), make([]byte, 8<<20))
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildWheel makes a pure-Python wheel (PEP 427) with one module and a RECORD of real hashes.
func buildWheel(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"airlock_e2e_demo/__init__.py", fmt.Sprintf("VALUE = %q\n", demoValue)},
		{"airlock_e2e_demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: airlock-e2e-demo\nVersion: 1.0\nSummary: e2e stand-in\n"},
		{"airlock_e2e_demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("airlock_e2e_demo-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("airlock_e2e_demo-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// buildNpmTarball makes an npm package tarball: package/package.json and package/index.js.
func buildNpmTarball(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", fmt.Sprintf(`{"name": %q, "version": "1.0.0", "main": "index.js"}`, demoPackage)},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", demoValue)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
