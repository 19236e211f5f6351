package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// A valid key authenticates only while its namespace carries the tenant label. Removing the tenant check from
// Authenticate fails this test (verified).
func TestAuthenticateNeedsATenantNamespace(t *testing.T) {
	secrets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	s := &Store{namespace: "airlock-system", lister: listerscorev1.NewSecretLister(secrets),
		tenants: &tenants{lister: listerscorev1.NewNamespaceLister(namespaces)}}
	keyFor := func(tenant string) string {
		key, id, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := secrets.Add(NewSecret("airlock-system", id, key, tenant, "", time.Now())); err != nil {
			t.Fatal(err)
		}
		return key
	}
	ns := func(name string, labels map[string]string) {
		if err := namespaces.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	ns("team-a", map[string]string{LabelTenant: "true"})
	ns("plain", nil)
	ns("off", map[string]string{LabelTenant: "false"})

	if p, err := s.Authenticate(context.Background(), keyFor("team-a")); err != nil || p.Tenant != "team-a" {
		t.Fatalf("tenant key: %+v %v", p, err)
	}
	for _, tenant := range []string{"plain", "off", "gone"} {
		p, err := s.Authenticate(context.Background(), keyFor(tenant))
		if !errors.Is(err, ErrNotTenant) || p != (Principal{}) || !strings.Contains(err.Error(), "airlock tenant create "+tenant+" --adopt") {
			t.Errorf("key of %s: %+v %v, want ErrNotTenant saying how to fix it", tenant, p, err)
		}
	}
	// A wrong key of a non-tenant is still just unauthenticated: the tenant is looked at only for valid keys.
	other, _, _ := NewKey()
	if _, err := s.Authenticate(context.Background(), other); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unknown key: %v", err)
	}
}
