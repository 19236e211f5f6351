package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"airlock.dev/airlock/internal/testutil/rbacenv"
)

// The manager's /metrics, served as cmd/manager serves it and running with exactly the generated RBAC
// (config/rbac), answers 401 without a token, 403 to a token not bound to airlock-metrics-reader and 200 to one
// that is. Without the authn/authz filter the 401 and 403 checks fail; without the
// tokenreviews/subjectaccessreviews rules (internal/controller/rbac.go) the 200 one does (both checked).
func TestIntegrationManagerMetricsNeedAnAuthorizedToken(t *testing.T) {
	env := rbacenv.Start(t, "")
	rbacDir := filepath.Join("..", "..", "config", "rbac")
	env.ApplyFiles(t, filepath.Join(rbacDir, "role.yaml"), filepath.Join(rbacDir, "role_binding.yaml"), filepath.Join(rbacDir, "metrics_reader_role.yaml"))
	env.Apply(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-metrics-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: airlock-metrics-reader}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: airlock-system}]
`)
	scraper, stranger := env.Token(t, "airlock-system", "prometheus"), env.Token(t, "airlock-system", "stranger")

	// The metrics server acts as the manager's ServiceAccount, so it has only the generated rules.
	mcfg := env.As(rbacenv.User("airlock-system", "airlock-manager"))
	hc, err := rest.HTTPClientFor(mcfg)
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	srv, err := metricsserver.NewServer(metricsOptions(addr), mcfg, hc)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = srv.Start(ctx) }()
	url := "https://" + addr + "/metrics"
	rbacenv.WaitServing(t, url)

	for _, c := range []struct {
		who   string
		token string
		want  int
	}{{"anonymous", "", http.StatusUnauthorized}, {"unbound token", stranger, http.StatusForbidden}, {"metrics-reader", scraper, http.StatusOK}} {
		if got, _ := rbacenv.Scrape(url, c.token); got != c.want {
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
