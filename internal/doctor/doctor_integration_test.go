package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// startEnvtest runs a real API server with Airlock's CRDs; KUBEBUILDER_ASSETS names its binaries (make
// test-integration builds them): a missing one fails the test.
func startEnvtest(t *testing.T) (client.Client, *kubernetes.Clientset) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run 'make test-integration' (it builds the binaries)")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := airlockv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// Gather reads what a real API server says: its version and APIs, the nodes, RuntimeClasses and an installed
// manager's settings; the probe leaves nothing behind, whether it made its namespace or was given one. envtest
// runs no scheduler or kubelet, so the probe pod never runs: it reports that, within its timeout. Fails with
// the probe's deletions left out: checked.
func TestIntegrationDoctor(t *testing.T) {
	c, cs := startEnvtest(t)
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	must(t, c.Create(ctx, n))
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.33.13", ContainerRuntimeVersion: "containerd://1.7.27", KernelVersion: "6.1.0"}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	must(t, c.Status().Update(ctx, n))
	must(t, c.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "gvisor"}))
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "airlock-system"}}))
	labels := map[string]string{"app.kubernetes.io/name": "airlock"}
	must(t, c.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "airlock-system", Name: "airlock-manager", Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "registry.example/airlock/manager:0.1.0",
				Args: []string{"--init-image=registry.example/airlock/init:0.1.0", "--default-runtime-class=sandboxed", "--isolating-handlers=gvisor"}}}}}}}))

	f, err := Gather(ctx, c, cs.Discovery(), "airlock-system")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.ServerVersion, "v1.") || !f.CRDs || len(f.Nodes) != 1 || len(f.RuntimeClasses) != 1 || f.Manager == nil {
		t.Fatalf("facts %+v", f)
	}
	s := SettingsOf(f, "localhost/airlock/init:dev")
	if s.InitImage != "registry.example/airlock/init:0.1.0" || s.DefaultRuntimeClass != "sandboxed" || strings.Join(s.IsolatingHandlers, ",") != "gvisor" {
		t.Errorf("settings of the installed manager: %+v", s)
	}
	o := PlanProbe(f, s, "", ProbeOptions{Image: s.InitImage, Timeout: 2 * time.Second})
	if o.RuntimeClass != "sandboxed" || o.Expect != "gvisor" {
		t.Errorf("probe plan %+v", o)
	}

	// A namespace of its own, deleted afterwards (envtest runs no namespace controller: it stays Terminating).
	res, err := Probe(ctx, c, cs, o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.NotRun, "not scheduled yet") || !strings.HasPrefix(res.Namespace, "airlock-doctor-") {
		t.Errorf("probe without a kubelet: %+v", res)
	}
	gone(t, c, res.Namespace, res.Namespace)

	// A given namespace stays; the probe's pod and policy go.
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	o.Namespace = "team-a"
	if res, err = Probe(ctx, c, cs, o); err != nil || res.NotRun == "" {
		t.Fatalf("%+v, %v", res, err)
	}
	gone(t, c, "team-a", "")
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &corev1.Namespace{}); err != nil {
		t.Errorf("the given namespace: %v", err)
	}
	fs := Judge(f, s)
	if e := status(t, fs, "NetworkPolicy enforcer"); e.Status != Unknown {
		t.Errorf("without a probe result: %+v", e)
	}
}

// gone checks that no probe pod or policy is left in ns and, when named, that the namespace is deleted.
func gone(t *testing.T, c client.Client, ns, namespace string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	var policies networkingv1.NetworkPolicyList
	must(t, c.List(ctx, &pods, client.InNamespace(ns)))
	must(t, c.List(ctx, &policies, client.InNamespace(ns)))
	if len(pods.Items)+len(policies.Items) != 0 {
		t.Errorf("left in %s: %d pods, %d policies", ns, len(pods.Items), len(policies.Items))
	}
	if namespace == "" {
		return
	}
	var got corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: namespace}, &got); !apierrors.IsNotFound(err) && got.DeletionTimestamp.IsZero() {
		t.Errorf("the probe's namespace %s is not being deleted: %v", namespace, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
