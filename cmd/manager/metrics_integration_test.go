package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"
)

// The manager's /metrics, served as cmd/manager serves it and running with exactly the generated RBAC
// (config/rbac/role.yaml), answers 401 without a token, 403 to a token not bound to airlock-metrics-reader and
// 200 to one that is. Without the authn/authz filter the 401 and 403 checks fail; without the
// tokenreviews/subjectaccessreviews rules (internal/controller/rbac.go) the 200 one does (both verified).
func TestIntegrationManagerMetricsNeedAnAuthorizedToken(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run 'make test-integration'")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "airlock-system"}}, metav1.CreateOptions{})
	must(t, err)
	clusterRole := func(file string) *rbacv1.ClusterRole {
		b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", file))
		must(t, err)
		var cr rbacv1.ClusterRole
		must(t, yaml.Unmarshal(b, &cr))
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{})
		must(t, err)
		return &cr
	}
	bind := func(role, sa string) {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "-" + sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "airlock-system"}},
		}, metav1.CreateOptions{})
		must(t, err)
	}
	token := func(sa string) string {
		_, err := cs.CoreV1().ServiceAccounts("airlock-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(t, err)
		tr, err := cs.CoreV1().ServiceAccounts("airlock-system").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		must(t, err)
		return tr.Status.Token
	}
	manager := clusterRole("role.yaml")
	reader := clusterRole("metrics_reader_role.yaml")
	bind(manager.Name, "airlock-manager")
	bind(reader.Name, "prometheus")
	scraper, stranger := token("prometheus"), token("stranger")

	// The metrics server acts as the manager's ServiceAccount, so it has only the generated rules.
	mcfg := rest.CopyConfig(cfg)
	mcfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:airlock-system:airlock-manager"}
	hc, err := rest.HTTPClientFor(mcfg)
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	srv, err := metricsserver.NewServer(metricsOptions(addr), mcfg, hc)
	must(t, err)
	go func() { _ = srv.Start(ctx) }()

	get := func(tok string) int {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed, as Prometheus is configured
		resp, err := c.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(20 * time.Second)
	for get("") == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range []struct {
		who   string
		token string
		want  int
	}{{"anonymous", "", http.StatusUnauthorized}, {"unbound token", stranger, http.StatusForbidden}, {"metrics-reader", scraper, http.StatusOK}} {
		if got := get(c.token); got != c.want {
			t.Errorf("%s: GET /metrics = %d, want %d", c.who, got, c.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
