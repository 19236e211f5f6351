package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"airlock.dev/airlock/internal/gateway/admin"
)

// installExecRole creates the gateway's exec ClusterRole exactly as config/gateway/rbac.yaml defines it.
func installExecRole(t *testing.T, c client.Client) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "gateway", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &cr); err != nil || cr.Kind != "ClusterRole" || cr.Name != admin.DefaultExecClusterRole {
			continue
		}
		if err := c.Create(context.Background(), &cr); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("config/gateway/rbac.yaml has no ClusterRole %s", admin.DefaultExecClusterRole)
}

// createTenant runs admin.CreateTenant while playing the quota controller envtest lacks (see gw.tenant).
func createTenant(t *testing.T, c client.Client, name string, o admin.TenantOptions) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			var q corev1.ResourceQuota
			if err := c.Get(ctx, types.NamespacedName{Namespace: name, Name: admin.QuotaName}, &q); err == nil {
				q.Status.Hard = q.Spec.Hard
				q.Status.Used = corev1.ResourceList{admin.QuotaResource: resource.MustParse("0")}
				if c.Status().Update(ctx, &q) == nil {
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return admin.CreateTenant(ctx, c, name, o)
}

// canExec asks the real API server (RBAC authorizer) whether user may exec into pods of ns.
func canExec(t *testing.T, c client.Client, user, ns string) bool {
	t.Helper()
	allowed := true
	for _, verb := range []string{"create", "get"} { // SPDY and WebSocket
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			Groups:             []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods", Subresource: "exec"}}}
		if err := c.Create(context.Background(), sar); err != nil {
			t.Fatal(err)
		}
		allowed = allowed && sar.Status.Allowed
	}
	return allowed
}

// `airlock tenant create` gives the gateway's ServiceAccount pods/exec in the tenant and nowhere else, as the
// API server's own authorizer decides. Without bindExec in CreateTenant the first check fails (verified).
func TestIntegrationTenantCreateGrantsExecOnlyThere(t *testing.T) {
	c, err := client.New(startEnv(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	installExecRole(t, c)
	gwNS := newNamespace(t, c, "airlock-gw-")
	tenant := fmt.Sprintf("exec-%d", time.Now().UnixNano()%1_000_000_000)
	o := admin.TenantOptions{MaxSandboxes: 3, GatewayServiceAccount: admin.DefaultGatewayServiceAccount,
		GatewayNamespace: gwNS, ExecClusterRole: admin.DefaultExecClusterRole}
	if err := createTenant(t, c, tenant, o); err != nil {
		t.Fatal(err)
	}
	gateway := "system:serviceaccount:" + gwNS + ":" + admin.DefaultGatewayServiceAccount
	if !canExec(t, c, gateway, tenant) {
		t.Errorf("the gateway may not exec in tenant %s after tenant create", tenant)
	}
	other := newNamespace(t, c, "not-a-tenant-")
	for _, ns := range []string{other, gwNS, "kube-system", ""} {
		if canExec(t, c, gateway, ns) {
			t.Errorf("the gateway may exec in %q, which is not a tenant", ns)
		}
	}
	if canExec(t, c, "system:serviceaccount:"+gwNS+":someone-else", tenant) {
		t.Error("the exec binding admits another ServiceAccount")
	}
}

// An existing namespace becomes a tenant only with --adopt; keys are made only for tenants. Removing either
// check from admin fails this test (verified).
func TestIntegrationAdoptAndKeysNeedATenant(t *testing.T) {
	c, err := client.New(startEnv(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	installExecRole(t, c)
	gwNS := newNamespace(t, c, "airlock-gw-")
	existing := newNamespace(t, c, "existing-")
	o := admin.TenantOptions{MaxSandboxes: 3, GatewayServiceAccount: admin.DefaultGatewayServiceAccount,
		GatewayNamespace: gwNS, ExecClusterRole: admin.DefaultExecClusterRole}

	if _, _, err := admin.CreateKey(context.Background(), c, gwNS, existing, "x"); !errors.Is(err, admin.ErrNotTenant) {
		t.Fatalf("keys create for an unlabelled namespace: %v, want ErrNotTenant", err)
	}
	err = createTenant(t, c, existing, o)
	if !errors.Is(err, admin.ErrNotTenant) || !strings.Contains(err.Error(), "--adopt") {
		t.Fatalf("tenant create on an existing namespace without --adopt: %v", err)
	}
	var rb rbacv1.RoleBinding
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: existing, Name: admin.ExecBindingName}, &rb); !apierrors.IsNotFound(err) {
		t.Fatalf("refused adoption left an exec binding: %v", err)
	}
	o.Adopt = true
	if err := createTenant(t, c, existing, o); err != nil {
		t.Fatalf("--adopt: %v", err)
	}
	var ns corev1.Namespace
	if err := c.Get(context.Background(), types.NamespacedName{Name: existing}, &ns); err != nil || ns.Labels[admin.LabelTenant] != "true" {
		t.Fatalf("adopted namespace labels %v (%v)", ns.Labels, err)
	}
	if _, _, err := admin.CreateKey(context.Background(), c, gwNS, existing, "x"); err != nil {
		t.Fatalf("keys create for the adopted tenant: %v", err)
	}
}

// A key stops working once its namespace loses the tenant label, within the watch delay, and works again when
// the label is back. Without the tenant check in auth.Store the refusal never comes (verified).
func TestIntegrationKeyOfNamespaceThatLostTheLabelIsRefused(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 5)
	if code, body := g.do(t, key, "GET", "/v1/sandboxes", nil); code != http.StatusOK {
		t.Fatalf("tenant key: %d %v", code, body)
	}
	setLabel := func(v *string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, admin.LabelTenant)
		if v != nil {
			patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, admin.LabelTenant, *v)
		}
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := g.c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	setLabel(nil)
	var last map[string]any
	waitFor(t, 5*time.Second, func() bool {
		var code int
		code, last = g.do(t, key, "GET", "/v1/sandboxes", nil)
		return code == http.StatusForbidden
	})
	if errCode(last) != CodeForbidden || !strings.Contains(fmt.Sprint(last), "not an Airlock tenant") {
		t.Errorf("refusal %v", last)
	}
	// Creating is refused too, not only reading.
	if code, _ := g.do(t, key, "POST", "/v1/sandboxes", map[string]any{"wait": false}); code != http.StatusForbidden {
		t.Errorf("create by a key of a non-tenant: %d", code)
	}
	on := "true"
	setLabel(&on)
	waitFor(t, 5*time.Second, func() bool {
		code, _ := g.do(t, key, "GET", "/v1/sandboxes", nil)
		return code == http.StatusOK
	})
}

// The API listener has no /metrics, with or without a key; the metrics handler (its own listener in
// cmd/gateway, --metrics-listen) serves the gateway's metrics. Putting /metrics back on the API mux fails the
// first check (verified).
func TestIntegrationMetricsOnlyOnTheirListener(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 5)
	g.srv.metrics.rejected.WithLabelValues(ns, "probe").Inc()
	for _, k := range []string{"", key} {
		if resp, _ := g.raw(t, k, "GET", "/metrics", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("API listener GET /metrics (key %v): %d, want 404", k != "", resp.StatusCode)
		}
	}
	m := httptest.NewServer(g.srv.MetricsHandler())
	defer m.Close()
	resp, err := http.Get(m.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `airlock_gateway_rejected_total{reason="probe",tenant="` + ns + `"} 1`; resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("metrics listener: %d, want %s in %.300s", resp.StatusCode, want, body)
	}
}
