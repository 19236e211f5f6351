package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// fakeCluster holds objs and the ClusterRoles an install binds in tenants.
func fakeCluster(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := airlockv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DefaultExecClusterRole}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: DefaultManagerClusterRole}})
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// readyQuota is a tenant quota whose status the (absent) quota controller has filled, so CreateTenant does not
// wait for it.
func readyQuota(ns string) *corev1.ResourceQuota {
	used := corev1.ResourceList{QuotaResource: resource.MustParse("0")}
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: ns},
		Status: corev1.ResourceQuotaStatus{Hard: used, Used: used}}
}

func cliOptions() TenantOptions {
	return TenantOptions{MaxSandboxes: 5, GatewayServiceAccount: DefaultGatewayServiceAccount,
		GatewayNamespace: DefaultGatewayNamespace, ExecClusterRole: DefaultExecClusterRole,
		ManagerServiceAccount: DefaultManagerServiceAccount, ManagerNamespace: DefaultGatewayNamespace,
		ManagerClusterRole: DefaultManagerClusterRole, KeyNamespace: DefaultKeyNamespace}
}

// tenant create makes the exec RoleBinding (to the ClusterRole, in the tenant only). Removing bindExec from
// CreateTenant fails this test.
func TestCreateTenantBindsExecInTheTenant(t *testing.T) {
	ctx := context.Background()
	c := fakeCluster(t, readyQuota("team-a"))
	if err := CreateTenant(ctx, c, "team-a", cliOptions()); err != nil {
		t.Fatal(err)
	}
	var rb rbacv1.RoleBinding
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: ExecBindingName}, &rb); err != nil {
		t.Fatalf("no exec RoleBinding: %v", err)
	}
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: "airlock-gateway", Namespace: "airlock-system"}
	if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != DefaultExecClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("binding %+v %+v", rb.RoleRef, rb.Subjects)
	}
	var crbs rbacv1.ClusterRoleBindingList
	if err := c.List(ctx, &crbs); err != nil || len(crbs.Items) != 0 {
		t.Errorf("tenant create made cluster-wide bindings: %v %v", crbs.Items, err)
	}
	// Idempotent: running it again keeps one binding and succeeds.
	if err := CreateTenant(ctx, c, "team-a", cliOptions()); err != nil {
		t.Fatalf("second run: %v", err)
	}
}

func TestCreateTenantRefusals(t *testing.T) {
	ctx := context.Background()
	existing := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps", Labels: map[string]string{"team": "x"}}}
	c := fakeCluster(t, existing, readyQuota("apps"))

	// An existing namespace that is not a tenant needs --adopt. Removing that check fails here.
	err := CreateTenant(ctx, c, "apps", cliOptions())
	if !errors.Is(err, ErrNotTenant) || !strings.Contains(err.Error(), "--adopt") {
		t.Fatalf("existing namespace without --adopt: %v", err)
	}
	var rb rbacv1.RoleBinding
	if err := c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: ExecBindingName}, &rb); err == nil {
		t.Fatal("a refused adoption still created the exec binding")
	}
	o := cliOptions()
	o.Adopt = true
	if err := CreateTenant(ctx, c, "apps", o); err != nil {
		t.Fatalf("--adopt: %v", err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: "apps"}, &ns); err != nil || ns.Labels[LabelTenant] != "true" || ns.Labels["team"] != "x" {
		t.Errorf("adopted namespace labels %v (%v): want the tenant label added, others kept", ns.Labels, err)
	}

	o = cliOptions()
	o.ExecClusterRole = "my-release-airlock-gateway-exec"
	if err := CreateTenant(ctx, c, "new-one", o); err == nil || !strings.Contains(err.Error(), "--exec-cluster-role") {
		t.Errorf("missing exec ClusterRole: %v", err)
	}
	o = cliOptions()
	o.ManagerClusterRole = "my-release-airlock-manager-tenant"
	if err := CreateTenant(ctx, c, "new-one", o); err == nil || !strings.Contains(err.Error(), "--manager-cluster-role") {
		t.Errorf("missing manager ClusterRole: %v", err)
	}
}

// Kubernetes' and Airlock's own namespaces never become tenants, with or without --adopt, existing or not, and
// nothing is written to them. Fails without SystemNamespaceError in validate: checked.
func TestCreateTenantRefusesSystemNamespaces(t *testing.T) {
	ctx := context.Background()
	var existing []client.Object
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", DefaultGatewayNamespace, DefaultKeyNamespace, "mgr-ns"} {
		existing = append(existing, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, readyQuota(ns))
	}
	c := fakeCluster(t, existing...)
	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "kube-new", DefaultGatewayNamespace, DefaultKeyNamespace, "mgr-ns"} {
		for _, adopt := range []bool{false, true} {
			o := cliOptions()
			o.Adopt = adopt
			o.ManagerNamespace = "mgr-ns"
			if err := CreateTenant(ctx, c, name, o); err == nil || !strings.Contains(err.Error(), "cannot be a tenant") {
				t.Errorf("tenant %s (adopt %v): %v, want a refusal", name, adopt, err)
			}
		}
		var rbs rbacv1.RoleBindingList
		if err := c.List(ctx, &rbs, client.InNamespace(name)); err != nil || len(rbs.Items) != 0 {
			t.Errorf("refused tenant %s got RoleBindings %v (%v)", name, rbs.Items, err)
		}
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err == nil && ns.Labels[LabelTenant] != "" {
			t.Errorf("refused tenant %s got the tenant label", name)
		}
	}
	// Names that only look alike are fine.
	if err := SystemNamespaceError("kubeflow"); err != nil {
		t.Errorf("kubeflow: %v", err)
	}
	if err := SystemNamespaceError("defaults"); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// tenant create binds the manager's per-tenant ClusterRole (pod and NetworkPolicy writes) in the tenant, and
// nowhere else. Fails without the manager's binding in bindings(): checked.
func TestCreateTenantBindsTheManagerInTheTenant(t *testing.T) {
	ctx := context.Background()
	c := fakeCluster(t, readyQuota("team-a"))
	if err := CreateTenant(ctx, c, "team-a", cliOptions()); err != nil {
		t.Fatal(err)
	}
	var rb rbacv1.RoleBinding
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: ManagerBindingName}, &rb); err != nil {
		t.Fatalf("no manager RoleBinding: %v", err)
	}
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: DefaultManagerServiceAccount, Namespace: DefaultGatewayNamespace}
	if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != DefaultManagerClusterRole || len(rb.Subjects) != 1 || rb.Subjects[0] != want {
		t.Errorf("binding %+v %+v", rb.RoleRef, rb.Subjects)
	}
	var all rbacv1.RoleBindingList
	if err := c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, b := range all.Items {
		if b.Namespace != "team-a" {
			t.Errorf("tenant create bound %s in %s", b.Name, b.Namespace)
		}
	}
}

// keys create refuses a namespace without the tenant label. Removing that check fails here.
func TestCreateKeyNeedsATenant(t *testing.T) {
	ctx := context.Background()
	c := fakeCluster(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{LabelTenant: "true"}}})
	_, _, err := CreateKey(ctx, c, "airlock-system", "default", "x")
	if !errors.Is(err, ErrNotTenant) || !strings.Contains(err.Error(), "airlock tenant create default --adopt") {
		t.Fatalf("key for a non-tenant namespace: %v", err)
	}
	if _, _, err := CreateKey(ctx, c, "airlock-system", "missing", "x"); err == nil {
		t.Fatal("key for a missing namespace")
	}
	if _, _, err := CreateKey(ctx, c, "airlock-system", "team-a", "x"); err != nil {
		t.Fatalf("key for a tenant: %v", err)
	}
}

// --templates-from copies the spec and Airlock's own annotations (what the tool descriptions quote), not others.
func TestCreateTenantCopiesTemplateAnnotations(t *testing.T) {
	ctx := context.Background()
	src := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "python-node", Namespace: "airlock-system",
		Annotations: map[string]string{"sandbox.airlock.dev/installed": "Python 3.11", "example.com/other": "x"}},
		Spec: airlockv1.SandboxTemplateSpec{Image: "img"}}
	c := fakeCluster(t, readyQuota("team-a"), src)
	o := cliOptions()
	o.TemplatesFrom = "airlock-system"
	if err := CreateTenant(ctx, c, "team-a", o); err != nil {
		t.Fatal(err)
	}
	var got airlockv1.SandboxTemplate
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "python-node"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Image != "img" || got.Annotations["sandbox.airlock.dev/installed"] != "Python 3.11" || got.Annotations["example.com/other"] != "" {
		t.Fatalf("copied template: %+v %v", got.Spec, got.Annotations)
	}
}
