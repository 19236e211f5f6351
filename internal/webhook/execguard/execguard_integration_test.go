package execguard_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
	"airlock.dev/airlock/internal/testutil/guardconfig"
	"airlock.dev/airlock/internal/webhook/certs"
	"airlock.dev/airlock/internal/webhook/execguard"
)

const (
	guardNS      = "airlock-system"
	gatewayUser  = "system:serviceaccount:" + guardNS + ":airlock-gateway"
	configName   = "airlock-exec-guard"
	secretName   = "airlock-manager-webhook-cert"
	noHostDetail = "does not have a host assigned" // envtest has no kubelet: where an admitted exec ends
)

// TestExecGuardIntegration runs the guard as the manager does (certificate issued into a Secret, CA injected
// into a URL-based ValidatingWebhookConfiguration) against a real kube-apiserver, and execs as the gateway's
// service account (impersonated), which RBAC allows everywhere here so that only the guard can refuse:
// an unowned pod is denied by the guard; a Sandbox's pod passes it and fails later, at the missing node;
// another identity is not affected. Without the webhook the denial checks fail: run once with the
// configuration deleted right after startGuard, the unowned exec, the missing pod and the attach all got past
// admission ("pod plain does not have a host assigned", "pods \"gone\" not found", ...).
func TestExecGuardIntegration(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run 'make test-integration' (it builds the binaries)")
	}
	level := zapcore.ErrorLevel // the guard logs every refusal; AIRLOCK_TEST_VERBOSE shows them
	if os.Getenv("AIRLOCK_TEST_VERBOSE") != "" {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, airlockv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	port := freePort(t)
	mustCreate(t, admin,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: guardNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: guardNS, Name: secretName}},
		guardConfig(fmt.Sprintf("https://127.0.0.1:%d%s", port, execguard.Path)),
		// RBAC lets the gateway exec and attach anywhere: whatever is refused below, the guard refused.
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gateway-exec"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach"}, Verbs: []string{"create", "get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gateway-exec"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gateway-exec"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: guardNS, Name: "airlock-gateway"}}},
	)
	startGuard(t, cfg, scheme, port)

	tenant := "team-a"
	mustCreate(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})
	sbx := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "conv-1"},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}}}
	mustCreate(t, admin, sbx)
	owned := testPod(tenant, "conv-1", map[string]string{sandbox.LabelName: "conv-1"})
	if err := controllerutil.SetControllerReference(sbx, owned, scheme); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, owned, testPod(tenant, "plain", nil))
	// No controller runs here: record the pod as the controller would.
	sbx.Status.PodName = owned.Name
	if err := admin.Status().Update(ctx, sbx); err != nil {
		t.Fatal(err)
	}

	gatewayCfg := rest.CopyConfig(cfg)
	gatewayCfg.Impersonate = rest.ImpersonationConfig{UserName: gatewayUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + guardNS, "system:authenticated"}}
	gateway := kubernetes.NewForConfigOrDie(gatewayCfg)
	adminCS := kubernetes.NewForConfigOrDie(cfg)

	// The API server picks up the injected caBundle within moments; until then its calls fail closed.
	waitFor(t, 30*time.Second, "the guard admits the gateway's exec into the Sandbox's pod", func() error {
		return expect(connect(ctx, gateway, tenant, owned.Name, "exec"), noHostDetail)
	})
	for _, c := range []struct {
		name, pod, sub, want string
		cs                   *kubernetes.Clientset
	}{
		{"gateway exec into an unowned pod", "plain", "exec", execguard.DenialPrefix + "pod team-a/plain is not a sandbox pod", gateway},
		{"gateway exec into a missing pod", "gone", "exec", execguard.DenialPrefix + "pod team-a/gone does not exist", gateway},
		{"gateway attach to the Sandbox's pod", owned.Name, "attach", execguard.DenialPrefix + "pods/attach is not allowed", gateway},
		{"gateway exec into the Sandbox's pod", owned.Name, "exec", noHostDetail, gateway},
		{"another identity's exec into an unowned pod", "plain", "exec", noHostDetail, adminCS},
	} {
		err := connect(ctx, c.cs, tenant, c.pod, c.sub)
		if err := expect(err, c.want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.want == noHostDetail && strings.Contains(err.Error(), execguard.DenialPrefix) {
			t.Errorf("%s: denied by the guard: %v", c.name, err)
		}
	}

	// A live read of pod and Sandbox per exec: what the guard adds to an exec's admission, on this machine.
	const n = 20
	timeIt := func(cs *kubernetes.Clientset) time.Duration {
		start := time.Now()
		for range n {
			_ = connect(ctx, cs, tenant, owned.Name, "exec")
		}
		return time.Since(start) / n
	}
	withGuard, without := timeIt(gateway), timeIt(adminCS)
	t.Logf("exec admission: %s per request through the guard, %s without it", withGuard, without)
}

func guardConfig(url string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return guardconfig.ForURL(configName, url, gatewayUser)
}

// startGuard runs a manager with the guard and the certificate rotator, wired as cmd/manager wires them, and
// waits until it is ready (certificate issued, CA injected).
func startGuard(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, port int) {
	t.Helper()
	var rot *certs.Rotator
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, TLSOpts: []func(*tls.Config){func(c *tls.Config) {
		c.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return rot.GetCertificate(h) }
	}}})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, WebhookServer: srv})
	if err != nil {
		t.Fatal(err)
	}
	rot, err = certs.New(mgr.GetAPIReader(), mgr.GetClient(), certs.Options{
		Secret:               client.ObjectKey{Namespace: guardNS, Name: secretName},
		WebhookConfiguration: configName, Hosts: []string{"127.0.0.1"}}, ctrl.Log.WithName("webhook-certs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(rot); err != nil {
		t.Fatal(err)
	}
	mgr.GetWebhookServer().Register(execguard.Path, &webhook.Admission{Handler: &execguard.Guard{Reader: mgr.GetAPIReader()}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	started := srv.StartedChecker()
	waitFor(t, 30*time.Second, "guard ready", func() error {
		if err := rot.ReadyCheck(nil); err != nil {
			return err
		}
		return started(nil)
	})
}

// connect POSTs to a pod's connect subresource: admission runs before the API server looks for the node, so
// without a kubelet the error says how far the request got.
func connect(ctx context.Context, cs *kubernetes.Clientset, ns, pod, sub string) error {
	return cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource(sub).
		VersionedParams(&corev1.PodExecOptions{Container: sandbox.ContainerName, Command: []string{"true"}, Stdout: true}, clientgoscheme.ParameterCodec).
		Do(ctx).Error()
}

func expect(err error, want string) error {
	if err == nil {
		return errors.New("succeeded; expected an error")
	}
	if !strings.Contains(err.Error(), want) {
		return fmt.Errorf("error %q does not contain %q", err, want)
	}
	return nil
}

func testPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: sandbox.ContainerName, Image: "busybox"}}}}
}

func mustCreate(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}
