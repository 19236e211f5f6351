package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway"
	"airlock.dev/airlock/internal/testutil/rbacenv"
)

// The gateway's /metrics, served as cmd/gateway serves it and acting with exactly config/gateway's RBAC,
// answers 401 without a token, 403 to a token not bound to airlock-metrics-reader (the API token of a tenant's
// pod would be one) and 200 with the metrics to one that is. Without the authn/authz filter the 401 and 403
// checks fail; without tokenreviews/subjectaccessreviews in the gateway's ClusterRole the 200 one does
// (both checked).
func TestIntegrationGatewayMetricsNeedAnAuthorizedToken(t *testing.T) {
	env := rbacenv.Start(t, "")
	root := filepath.Join("..", "..")
	env.ApplyFiles(t, filepath.Join(root, "config", "gateway", "rbac.yaml"), filepath.Join(root, "config", "rbac", "metrics_reader_role.yaml"))
	env.Apply(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-metrics-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: airlock-metrics-reader}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]
`)
	scraper, stranger := env.Token(t, "monitoring", "prometheus"), env.Token(t, "team-a", "default")

	reg := prometheus.NewRegistry()
	usage := gateway.NewUsageCollector(func() []airlockv1.Sandbox {
		return []airlockv1.Sandbox{{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s1"}}}
	})
	if err := reg.Register(usage); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	srv, err := newMetricsServer(env.As(rbacenv.User("airlock-system", "airlock-gateway")), addr, "", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		if err := srv.serve(ctx); err != nil {
			t.Error(err)
		}
	}()
	url := "https://" + addr + "/metrics"
	rbacenv.WaitServing(t, url)

	for _, c := range []struct {
		who, token string
		want       int
	}{{"anonymous", "", http.StatusUnauthorized}, {"a tenant's token", stranger, http.StatusForbidden}, {"metrics-reader", scraper, http.StatusOK}} {
		code, body := rbacenv.Scrape(url, c.token)
		if code != c.want {
			t.Errorf("%s: GET /metrics = %d, want %d (%.200s)", c.who, code, c.want, body)
		}
		if leaked := strings.Contains(body, "airlock_gateway_active_sandboxes"); leaked != (c.want == http.StatusOK) {
			t.Errorf("%s: metrics in the answer: %v", c.who, leaked)
		}
	}
	// Plain HTTP gets no metrics either.
	if code, body := rbacenv.Scrape("http://"+addr+"/metrics", scraper); code == http.StatusOK || strings.Contains(body, "airlock_gateway") {
		t.Errorf("plain HTTP: %d %.200s", code, body)
	}
}
