package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/testutil/guardconfig"
	"airlock.dev/airlock/internal/webhook/execguard"
)

// The exec guard as the e2e manager serves it: on loopback, called by the host's API server through a
// URL-based configuration. It guards a stand-in gateway identity of its own (the gateway process of this suite
// runs with the admin kubeconfig), so nothing else in the run is affected.
const (
	guardNamespace = "airlock-e2e-guard"
	guardSecret    = "exec-guard-cert"
	guardConfig    = "airlock-e2e-exec-guard"
	guardUser      = "system:serviceaccount:" + guardNamespace + ":airlock-gateway"
)

// execGuardArgs are the manager's flags for the guard, set by prepareExecGuard; restarts reuse them.
var execGuardArgs []string

// prepareExecGuard creates what an install creates before the manager starts (the empty certificate Secret
// and the webhook configuration) and picks the guard's loopback port.
func prepareExecGuard(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: guardNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: guardNamespace, Name: guardSecret}},
	} {
		if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
	}
	// A configuration left by an earlier run names another port: replace it.
	if err := deleteExecGuardConfig(ctx); err != nil {
		return err
	}
	url := "https://" + addr + execguard.Path
	vwc := guardconfig.ForURL(guardConfig, url, guardUser)
	if err := k8s.Create(ctx, vwc); err != nil {
		return fmt.Errorf("creating the exec guard's webhook configuration: %w", err)
	}
	execGuardArgs = []string{"--exec-webhook=true", "--webhook-bind-address=" + addr,
		"--webhook-cert-secret=" + guardNamespace + "/" + guardSecret, "--webhook-config-name=" + guardConfig,
		"--webhook-cert-hosts=127.0.0.1"}
	return nil
}

func deleteExecGuardConfig(ctx context.Context) error {
	err := k8s.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: guardConfig}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the exec guard's webhook configuration: %w", err)
	}
	return nil
}

// TestExecGuard: the gateway's identity cannot exec into a pod in kube-system (RBAC refuses with the chart's
// per-tenant binding; with pods/exec bound cluster-wide the guard refuses), nor into an unlabelled pod or a
// pod that copies a live Sandbox's ownerReference in a tenant namespace where RBAC allows exec (the guard),
// while the gateway's exec engine runs commands in the Sandbox's own pod.
//
// Run once with the webhook configuration deleted before the checks, this test failed: `id` ran in both
// unowned pods ("uid=1000(sandbox)") and the kube-system exec reached CoreDNS's container (the runtime's
// `exec: "id": executable file not found`, i.e. only the image's lack of `id` stopped it).
func TestExecGuard(t *testing.T) {
	ctx := context.Background()
	tenant := newTenant(t)
	sbx := createSandbox(t, tenant, "guarded")
	waitReady(t, tenant, sbx.Name)
	own := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: tenant, Name: sbx.Name}, own); err != nil {
		t.Fatal(err)
	}
	plain := plainPod(tenant, "plain", nil, nil)
	copycat := plainPod(tenant, "copycat", own.Labels, own.OwnerReferences)
	for _, p := range []*corev1.Pod{plain, copycat} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	system := runningPod(t, "kube-system")

	// The chart's gateway exec role, bound in the tenant namespace as the chart binds it per tenant.
	execRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "airlock-e2e-guard-exec"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}}}}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: guardNamespace, Name: "airlock-gateway"}}
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: execRole.Name}
	tenantBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "airlock-e2e-guard-exec"}, RoleRef: roleRef, Subjects: subjects}
	wideBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "airlock-e2e-guard-exec"}, RoleRef: roleRef, Subjects: subjects}
	for _, o := range []client.Object{execRole, tenantBinding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	for _, p := range []*corev1.Pod{plain, copycat} {
		waitRunning(t, tenant, p.Name)
	}

	gwCfg := rest.CopyConfig(cfg)
	gwCfg.Impersonate = rest.ImpersonationConfig{UserName: guardUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + guardNamespace, "system:authenticated"}}
	gwEngine, err := podexec.New(gwCfg, podexec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The gateway's own path works: the manager injected the CA at start-up, and the API server follows.
	eventually(t, 30*time.Second, "the guard admits the gateway's exec into its Sandbox's pod", func() error {
		req, err := target(ctx, tenant, own.Name)
		if err != nil {
			return err
		}
		req.Shell, req.Timeout = "echo admitted", 20*time.Second
		res, err := gwEngine.Run(ctx, req)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || res.Stdout != "admitted\n" {
			return fmt.Errorf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		return nil
	})

	if _, err := idExec(ctx, gwCfg, system.Namespace, system.Name, system.Spec.Containers[0].Name); err == nil ||
		!strings.Contains(err.Error(), "is forbidden: User \""+guardUser+"\"") || strings.Contains(err.Error(), execguard.DenialPrefix) {
		t.Errorf("exec into kube-system with per-tenant RBAC: want RBAC's refusal, got %v", err)
	}
	for _, c := range []struct{ pod, want string }{
		{plain.Name, "is not a sandbox pod: no controller owns it"},
		{copycat.Name, "is not the pod Sandbox " + sbx.Name + " records"},
	} {
		out, err := idExec(ctx, gwCfg, tenant, c.pod, "sandbox")
		if err == nil || !strings.Contains(err.Error(), execguard.DenialPrefix) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("exec into %s/%s: want the guard's refusal %q, got output %q, error %v", tenant, c.pod, c.want, out, err)
		}
	}

	// pods/exec bound cluster-wide (gateway.rbac.clusterWideExec=true): RBAC lets it into kube-system, the
	// guard does not.
	if err := k8s.Create(ctx, wideBinding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), wideBinding) })
	eventually(t, 30*time.Second, "the guard refuses exec into kube-system once RBAC allows it", func() error {
		out, err := idExec(ctx, gwCfg, system.Namespace, system.Name, system.Spec.Containers[0].Name)
		if err == nil || !strings.Contains(err.Error(), execguard.DenialPrefix+"pod kube-system/"+system.Name+" is not a sandbox pod") {
			return fmt.Errorf("output %q, error %v", out, err)
		}
		return nil
	})
	// Other identities are not the guard's business: the admin still execs into the unowned pod.
	if out, err := idExec(ctx, cfg, tenant, plain.Name, "sandbox"); err != nil || !strings.Contains(out, "uid=1000") {
		t.Errorf("admin exec into the unowned pod: output %q, error %v", out, err)
	}
}

// plainPod is a restricted-compliant pod running the sandbox image's sleep, with a container named "sandbox".
func plainPod(ns, name string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: owners},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "sandbox", Image: sandboxImage, Command: []string{"sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
}

func waitRunning(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 90*time.Second, "pod "+ns+"/"+name+" running", func() error {
		p := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
}

// runningPod returns a running pod of the namespace.
func runningPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no running pod in %s", ns)
	return nil
}

// idExec runs `id` in a container over SPDY with client-go, as any client holding the identity could: no
// airlock-init needed, so a pod the guard wrongly admitted shows up as output.
func idExec(ctx context.Context, c *rest.Config, ns, pod, container string) (string, error) {
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: []string{"id"}, Stdout: true, Stderr: true}, clientgoscheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%w (stderr %q)", err, stderr.String())
	}
	return stdout.String(), nil
}
