package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"airlock.dev/airlock/internal/gateway/auth"
)

// notTenant authenticates every key to a namespace that is no longer a tenant, as auth.Store reports it.
type notTenant struct{}

func (notTenant) Authenticate(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, fmt.Errorf("%w: namespace t1 has no label", auth.ErrNotTenant)
}

// A valid key of a namespace that is not a tenant is 403 forbidden, saying why; not 401 (the key is fine) and
// not 503 (retrying will not help). Removing the ErrNotTenant branch of authenticate fails this test.
func TestNotATenantIs403(t *testing.T) {
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: notTenant{}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := call(t, s.Handler(), "GET", "/v1/sandboxes", "")
	if code != 403 || errCode(body) != CodeForbidden || !strings.Contains(fmt.Sprint(body), "not an Airlock tenant") {
		t.Fatalf("key of a non-tenant: %d %v", code, body)
	}
}

// /metrics names tenants: it is not on the API handler, only on MetricsHandler (served on --metrics-listen).
// Putting the route back on the API mux fails this test.
func TestMetricsAreNotOnTheAPIHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_test_total", Help: "a probe"}))
	s, err := New(Options{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Engine: noEngine{}, Auth: oneKey("good"), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 404 {
		t.Errorf("API handler GET /metrics: %d, want 404", rec.Code)
	}
	rec = httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "airlock_test_total 0") {
		t.Errorf("metrics handler: %d %.200s", rec.Code, rec.Body.String())
	}
}
