// Package e2e runs Airlock against the project's real single-node cluster (hack/local-cluster.sh): real pods
// under gVisor and runc, a real NetworkPolicy enforcer, the real manager binary. `make test-e2e` brings the
// cluster up, builds and imports the images, and sets the environment below.
package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// Environment of the run, set by `make test-e2e`. A missing one fails the run: an e2e that silently skips
// proves nothing.
var (
	kubeconfig   = os.Getenv("KUBECONFIG")
	managerBin   = os.Getenv("AIRLOCK_E2E_MANAGER")
	initImage    = os.Getenv("AIRLOCK_E2E_INIT_IMAGE")
	sandboxImage = os.Getenv("AIRLOCK_E2E_SANDBOX_IMAGE")
	kubectlBin   = os.Getenv("AIRLOCK_E2E_KUBECTL")
)

var (
	scheme = runtime.NewScheme()
	cfg    *rest.Config
	k8s    client.WithWatch
	engine *podexec.Engine
	mgr    *managerProc
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		code = 1
	}
	removeRunFiles(code == 0)
	os.Exit(code)
}

// runFiles are the files and directories the run leaves in the temp dir (the manager's and gateways' logs, the
// CLI it builds): removed when the run passes, kept for a look when it fails.
var runFiles struct {
	sync.Mutex
	logs, other []string
}

func addRunFile(path string, isLog bool) {
	runFiles.Lock()
	defer runFiles.Unlock()
	if slices.Contains(runFiles.logs, path) || slices.Contains(runFiles.other, path) {
		return // the manager's log, again after a restart
	}
	if isLog {
		runFiles.logs = append(runFiles.logs, path)
	} else {
		runFiles.other = append(runFiles.other, path)
	}
}

func removeRunFiles(passed bool) {
	runFiles.Lock()
	defer runFiles.Unlock()
	remove := runFiles.other
	if passed {
		remove = append(remove, runFiles.logs...)
	} else if len(runFiles.logs) > 0 {
		fmt.Fprintln(os.Stderr, "e2e: logs kept:", strings.Join(runFiles.logs, " "))
	}
	for _, p := range remove {
		_ = os.RemoveAll(p)
	}
}

func setup(m *testing.M) (int, error) {
	for name, v := range map[string]string{"KUBECONFIG": kubeconfig, "AIRLOCK_E2E_MANAGER": managerBin,
		"AIRLOCK_E2E_INIT_IMAGE": initImage, "AIRLOCK_E2E_SANDBOX_IMAGE": sandboxImage, "AIRLOCK_E2E_KUBECTL": kubectlBin} {
		if v == "" {
			return 1, fmt.Errorf("%s is not set: run the end-to-end tests with 'make test-e2e'", name)
		}
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		return 1, err
	}
	var err error
	if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return 1, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	if err := serverIsLocal(cfg.Host); err != nil {
		return 1, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	if k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return 1, err
	}
	if engine, err = podexec.New(cfg, podexec.Options{}); err != nil {
		return 1, err
	}
	if out, err := exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
		"-f", "../../config/crd/bases").CombinedOutput(); err != nil {
		return 1, fmt.Errorf("installing CRDs: %v\n%s", err, out)
	}
	if out, err := exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established",
		"-f", "../../config/crd/bases", "--timeout=60s").CombinedOutput(); err != nil {
		return 1, fmt.Errorf("waiting for CRDs: %v\n%s", err, out)
	}
	if err := waitServed(60 * time.Second); err != nil {
		return 1, err
	}
	// The finalizer admission policy, as installs have it: without it the manager adds the finalizer with a
	// write of its own, which the benchmarks would measure and installs do not pay.
	if out, err := exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
		"-k", "../../config/admission").CombinedOutput(); err != nil {
		return 1, fmt.Errorf("installing the finalizer admission policy: %v\n%s", err, out)
	}
	defer func() {
		_ = exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "delete", "--ignore-not-found", "-k", "../../config/admission").Run()
	}()
	if err := prepareExecGuard(context.Background()); err != nil {
		return 1, err
	}
	defer func() { _ = deleteExecGuardConfig(context.Background()) }()
	if mgr, err = startManager(); err != nil {
		return 1, err
	}
	defer func() { mgr.stop() }() // mgr may be replaced by a restart during the run
	defer func() {
		if gw != nil {
			gw.stop()
		}
	}()
	return m.Run(), nil
}

// newTenant creates a namespace that enforces the restricted Pod Security Standard, with the default
// templates: python-node under gVisor and python-node-runc under runc.
func newTenant(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn": "restricted",
	}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns.Name) })
	for name, rc := range map[string]string{"python-node": "gvisor", "python-node-runc": "runc"} {
		tpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: rc}}
		if err := k8s.Create(ctx, tpl); err != nil {
			t.Fatalf("creating template %s: %v", name, err)
		}
	}
	return ns.Name
}

// deleteNamespace deletes sandboxes first (their finalizers need the manager), then the namespace, and waits.
func deleteNamespace(t testing.TB, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = k8s.DeleteAllOf(ctx, &airlockv1.Sandbox{}, client.InNamespace(ns))
	_ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for ctx.Err() == nil {
		if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("namespace %s was not deleted within 2 minutes", ns)
}

// serverIsLocal refuses to run unless the API server's address is on this machine. The local cluster's node IP
// lives on a veth that `down` removes; without this check a stale kubeconfig would send the tests' traffic
// along the default route, off the machine.
func serverIsLocal(host string) error {
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("parsing API server address %q: %w", host, err)
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil {
		return fmt.Errorf("API server address %q is not an IP address on this machine", host)
	}
	if ip.IsLoopback() {
		return nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return nil
		}
	}
	return fmt.Errorf("API server %s is not on this machine (is the local cluster up? hack/local-cluster.sh status)", host)
}

// waitServed waits until the suite's client can list every kind of ours. Established is not enough: on a
// fresh API server discovery may list the new group a moment later, and a client that looked first is told
// the kind does not exist.
func waitServed(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, list := range []client.ObjectList{&airlockv1.SandboxList{}, &airlockv1.SandboxTemplateList{}, &airlockv1.SandboxPoolList{}} {
		for {
			err := k8s.List(context.Background(), list, client.Limit(1))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("our CRDs are established but not served: %w", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
