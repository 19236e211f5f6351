package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/sandbox"
)

// managerSA is the manager's identity as config/rbac binds it.
const managerSA = "system:serviceaccount:airlock-system:airlock-manager"

// installManagerRBAC creates the generated ClusterRoles (config/rbac/role.yaml) and binds airlock-manager
// cluster-wide, as config/rbac/role_binding.yaml does; airlock-manager-tenant is bound by bindManagerIn.
func installManagerRBAC(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	var names []string
	for {
		var cr rbacv1.ClusterRole
		if err := dec.Decode(&cr); err != nil {
			break
		}
		if cr.Name == "" {
			continue
		}
		names = append(names, cr.Name)
		if err := c.Create(ctx, &cr); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if strings.Join(names, ",") != "airlock-manager,airlock-manager-tenant" {
		t.Fatalf("config/rbac/role.yaml has ClusterRoles %v, want airlock-manager and airlock-manager-tenant", names)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "airlock-manager"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "airlock-manager"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "airlock-manager", Namespace: "airlock-system"}}}
	if err := c.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// bindManagerIn makes ns a tenant for the manager, as `airlock tenant create` and the chart's tenants do.
func bindManagerIn(t *testing.T, c client.Client, ns string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "airlock-manager-tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "airlock-manager-tenant"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "airlock-manager", Namespace: "airlock-system"}}}
	if err := c.Create(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
}

// The manager, running with exactly the generated RBAC, creates sandboxes in a tenant, and in a namespace that
// is not one it creates nothing and says why on Ready (NamespaceNotTenant, naming the fix), not failing for
// good: once the namespace is made a tenant, the sandbox starts. Without notTenant the policy's Forbidden is a
// silent retry and the reason never shows: checked.
func TestIntegrationSandboxOutsideATenantSaysSo(t *testing.T) {
	_, c := startEnv(t)
	installManagerRBAC(t, c)
	startManager(t, managerOptions{as: managerSA})
	ctx, g := context.Background(), NewWithT(t)

	tenant, other := newNamespace(t, c), newNamespace(t, c)
	bindManagerIn(t, c, tenant)
	for _, ns := range []string{tenant, other} {
		g.Expect(c.Create(ctx, makeTemplate(ns, "py", "localhost/airlock/sandbox-python:1").obj())).To(Succeed())
		g.Expect(c.Create(ctx, makeSandbox(ns, "s1").template("py").obj())).To(Succeed())
	}
	getPodAndPolicy(t, c, tenant, "s1")

	g.Eventually(func(g Gomega) {
		s := getSandbox(t, c, other, "s1")
		ready := meta.FindStatusCondition(s.Status.Conditions, airlockv1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(ReasonNamespaceNotTenant))
		g.Expect(ready.Message).To(ContainSubstring("airlock tenant create " + other))
		g.Expect(s.Status.Phase).To(Equal(airlockv1.PhasePending))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: other, Name: "s1"}, &networkingv1.NetworkPolicy{})).NotTo(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: other, Name: "s1"}, &corev1.Pod{})).NotTo(Succeed())

	// Made a tenant, the namespace gets its sandbox at the next retry (RoleBindings are not watched).
	bindManagerIn(t, c, other)
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: other, Name: "s1"}, &corev1.Pod{})
	}, retryBlocked+15*time.Second, 250*time.Millisecond).Should(Succeed())
}

// startPoolReconcilerAs runs the pool reconciler alone, acting as user with the install's RBAC.
func startPoolReconcilerAs(t *testing.T, user string) {
	t.Helper()
	cfg, _ := startEnv(t)
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: CacheOptions(), Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	p := &PoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
		Recorder: mgr.GetEventRecorder("airlock-manager"), Clock: clock.RealClock{}, Defaults: sandbox.DefaultDefaults(),
		Pod: testPodOptions(), Attestations: &Attestations{Logs: attestingLogs{c: mgr.GetAPIReader()}}}
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatalf("setting up pool controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("manager did not stop within 30s")
		}
	})
}

// A SandboxPool outside a tenant gets no members and says why on Ready, as a Sandbox does; in a tenant its
// members start. Without notTenant the member policy's Forbidden is a silent retry: checked.
func TestIntegrationPoolOutsideATenantSaysSo(t *testing.T) {
	_, c := startEnv(t)
	installManagerRBAC(t, c)
	startPoolReconcilerAs(t, managerSA)
	ctx, g := context.Background(), NewWithT(t)
	tenant, other := newNamespace(t, c), newNamespace(t, c)
	bindManagerIn(t, c, tenant)
	for _, ns := range []string{tenant, other} {
		g.Expect(c.Create(ctx, makeTemplate(ns, "py", "localhost/airlock/sandbox-python:1").obj())).To(Succeed())
		g.Expect(c.Create(ctx, makePool(ns, "warm", "py", 1))).To(Succeed())
	}
	g.Eventually(func() (int, error) {
		var pods corev1.PodList
		err := c.List(ctx, &pods, client.InNamespace(tenant))
		return len(pods.Items), err
	}, 20*time.Second, 100*time.Millisecond).Should(Equal(1), "the tenant's pool starts its member")
	g.Eventually(func(g Gomega) {
		var pool airlockv1.SandboxPool
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: other, Name: "warm"}, &pool)).To(Succeed())
		ready := meta.FindStatusCondition(pool.Status.Conditions, airlockv1.PoolConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(ReasonNamespaceNotTenant))
		g.Expect(ready.Message).To(ContainSubstring("airlock tenant create " + other))
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace(other))).To(Succeed())
	g.Expect(pods.Items).To(BeEmpty())
}
