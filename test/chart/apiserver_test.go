package chart

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/testutil/rbacenv"
)

// What an install lets the manager and the gateway do, asked of a real API server's RBAC authorizer
// (SubjectAccessReview) after applying the install's RBAC: the chart with a tenant, and config/default with a
// tenant made by the CLI's own code. The manager writes pods only in the tenant (not kube-system, default or
// its own namespace) and still reads them everywhere; the gateway reads the API keys and not the exec guard's
// certificate. A write verb back in the manager's cluster-wide role, or the key Role back in the release
// namespace, fails here (checked).
func TestInstalledRBACAgainstAnAPIServer(t *testing.T) {
	installs := map[string]func(t *testing.T, env *rbacenv.Env){
		"chart": func(t *testing.T, env *rbacenv.Env) {
			out, stderr, err := helmTemplate(t, chartDir(t), "airlock", "--set", "tenants[0].name=team-a")
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			env.Apply(t, out)
		},
		"make deploy + airlock tenant create": func(t *testing.T, env *rbacenv.Env) {
			for _, dir := range []string{"default", "keys"} {
				env.Apply(t, kustomize(t, filepath.Join(repoRoot(t), "config", dir)))
			}
			tenantCreate(t, env, "team-a")
		},
	}
	manager, gateway := rbacenv.User(releaseNamespace, "airlock-manager"), rbacenv.User(releaseNamespace, "airlock-gateway")
	for name, install := range installs {
		t.Run(name, func(t *testing.T) {
			env := rbacenv.Start(t, k8sBinDir(t))
			install(t, env)
			for _, c := range []struct {
				user string
				a    rbacenv.Access
				want bool
			}{
				{manager, rbacenv.Access{Verb: "create", Resource: "pods", Namespace: "team-a"}, true},
				{manager, rbacenv.Access{Verb: "delete", Resource: "pods", Namespace: "team-a"}, true},
				{manager, rbacenv.Access{Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies", Namespace: "team-a"}, true},
				{manager, rbacenv.Access{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "team-a"}, true},
				{manager, rbacenv.Access{Verb: "watch", Resource: "pods"}, true},
				{manager, rbacenv.Access{Verb: "list", Group: "networking.k8s.io", Resource: "networkpolicies"}, true},
				{manager, rbacenv.Access{Verb: "create", Resource: "pods", Namespace: "kube-system"}, false},
				{manager, rbacenv.Access{Verb: "create", Resource: "pods", Namespace: "default"}, false},
				{manager, rbacenv.Access{Verb: "create", Resource: "pods", Namespace: releaseNamespace}, false},
				{manager, rbacenv.Access{Verb: "patch", Resource: "pods", Namespace: "kube-system"}, false},
				{manager, rbacenv.Access{Verb: "delete", Resource: "pods", Namespace: "kube-system"}, false},
				{manager, rbacenv.Access{Verb: "delete", Group: "networking.k8s.io", Resource: "networkpolicies", Namespace: "kube-system"}, false},
				{manager, rbacenv.Access{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "kube-system"}, false},
				{gateway, rbacenv.Access{Verb: "watch", Resource: "secrets", Namespace: keyNamespace}, true},
				{gateway, rbacenv.Access{Verb: "get", Resource: "secrets", Namespace: keyNamespace, Name: "airlock-key-abc"}, true},
				{gateway, rbacenv.Access{Verb: "get", Resource: "secrets", Namespace: releaseNamespace, Name: "airlock-manager-webhook-cert"}, false},
				{gateway, rbacenv.Access{Verb: "list", Resource: "secrets", Namespace: releaseNamespace}, false},
				{gateway, rbacenv.Access{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "team-a"}, true},
				{gateway, rbacenv.Access{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "kube-system"}, false},
				{gateway, rbacenv.Access{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
			} {
				if got := env.Allowed(t, c.user, c.a); got != c.want {
					t.Errorf("%s may %s: %v, want %v", c.user, c.a, got, c.want)
				}
			}
		})
	}
}

// tenantCreate runs the CLI's `airlock tenant create NAME` with its default names. envtest has no quota
// controller, so the quota's status is filled here first, as the controller would.
func tenantCreate(t *testing.T, env *rbacenv.Env, name string) {
	t.Helper()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{admin.LabelTenant: "true"}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: admin.QuotaName}}
	if err := c.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	zero := corev1.ResourceList{admin.QuotaResource: resource.MustParse("0")}
	q.Status = corev1.ResourceQuotaStatus{Hard: zero, Used: zero}
	if err := c.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	opts := admin.TenantOptions{MaxSandboxes: 5,
		GatewayServiceAccount: admin.DefaultGatewayServiceAccount, GatewayNamespace: admin.DefaultGatewayNamespace, ExecClusterRole: admin.DefaultExecClusterRole,
		ManagerServiceAccount: admin.DefaultManagerServiceAccount, ManagerNamespace: admin.DefaultGatewayNamespace, ManagerClusterRole: admin.DefaultManagerClusterRole,
		KeyNamespace: admin.DefaultKeyNamespace}
	if err := admin.CreateTenant(ctx, c, name, opts); err != nil {
		t.Fatalf("airlock tenant create %s: %v", name, err)
	}
}
