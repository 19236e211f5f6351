package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

var hosts = []string{"airlock-manager-webhook.airlock-system.svc", "127.0.0.1"}

func servingCert(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(data[certKey], data[keyKey])
	if err != nil {
		t.Fatalf("serving pair: %v", err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueFromEmptyThenReuse(t *testing.T) {
	now := time.Now()
	data, changed, err := issue(nil, hosts, now)
	if err != nil || !changed {
		t.Fatalf("first issue: changed=%v err=%v", changed, err)
	}
	c := servingCert(t, data)
	if len(c.DNSNames) != 1 || c.DNSNames[0] != hosts[0] || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("SANs: DNS %v IP %v", c.DNSNames, c.IPAddresses)
	}
	if !validServing(data, mustCA(t, data, now), hosts, now) {
		t.Error("freshly issued certificate is not valid for its hosts")
	}
	again, changed, err := issue(data, hosts, now.Add(time.Hour))
	if err != nil || changed || !bytes.Equal(again[certKey], data[certKey]) {
		t.Errorf("a valid certificate must be reused: changed=%v err=%v", changed, err)
	}
}

func mustCA(t *testing.T, data map[string][]byte, now time.Time) *x509.Certificate {
	t.Helper()
	ca, _ := parseCA(data, now)
	if ca == nil {
		t.Fatal("stored CA does not parse")
	}
	return ca
}

// A new host or a certificate near its end gets a new serving certificate from the same CA (the caBundle the
// API server holds stays valid); a CA near its end is replaced.
func TestIssueRenews(t *testing.T) {
	now := time.Now()
	data, _, err := issue(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		hosts  []string
		at     time.Time
		sameCA bool
	}{
		"new host":              {append([]string{"other.svc"}, hosts...), now, true},
		"serving near end":      {hosts, now.Add(certValidity - certRenew + time.Hour), true},
		"CA near end":           {hosts, now.Add(caValidity - caRenew + time.Hour), false},
		"serving expired":       {hosts, now.Add(certValidity + time.Hour), true},
		"garbled serving":       {hosts, now, true},
		"serving of a stranger": {hosts, now, true},
	} {
		t.Run(name, func(t *testing.T) {
			in := map[string][]byte{}
			for k, v := range data {
				in[k] = v
			}
			switch name {
			case "garbled serving":
				in[certKey] = []byte("garbage")
			case "serving of a stranger":
				other, _, err := issue(nil, hosts, now)
				if err != nil {
					t.Fatal(err)
				}
				in[certKey], in[keyKey] = other[certKey], other[keyKey]
			}
			out, changed, err := issue(in, c.hosts, c.at)
			if err != nil || !changed {
				t.Fatalf("changed=%v err=%v", changed, err)
			}
			if got := bytes.Equal(out[CACertKey], data[CACertKey]); got != c.sameCA {
				t.Errorf("same CA = %v, want %v", got, c.sameCA)
			}
			if !validServing(out, mustCA(t, out, c.at), c.hosts, c.at) {
				t.Error("renewed certificate is not valid")
			}
		})
	}
}

func TestSyncIssuesInjectsAndServes(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secret := types.NamespacedName{Namespace: "airlock-system", Name: "cert"}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a.sandbox.airlock.dev"}, {Name: "b.sandbox.airlock.dev"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name}}, vwc).Build()
	r, err := New(c, c, Options{Secret: secret, WebhookConfiguration: "guard", Hosts: hosts}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if r.ReadyCheck(httptest.NewRequest("GET", "/readyz", nil)) == nil {
		t.Error("ready before the first sync")
	}
	if _, err := r.GetCertificate(nil); err == nil {
		t.Error("serves a certificate before the first sync")
	}
	ctx := context.Background()
	if err := r.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := r.ReadyCheck(httptest.NewRequest("GET", "/readyz", nil)); err != nil {
		t.Errorf("not ready after sync: %v", err)
	}
	var got corev1.Secret
	if err := c.Get(ctx, secret, &got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "guard"}, vwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, got.Data[CACertKey]) {
			t.Errorf("webhook %s caBundle is not the Secret's CA", w.Name)
		}
	}
	served, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(vwc.Webhooks[0].ClientConfig.CABundle)
	leaf, err := x509.ParseCertificate(served.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: hosts[0]}); err != nil {
		t.Errorf("served certificate does not verify against the injected bundle: %v", err)
	}
	// A second replica (or the next resync) reuses what is stored.
	rv := got.ResourceVersion
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, secret, &got); err != nil || got.ResourceVersion != rv {
		t.Errorf("resync rewrote a valid Secret (rv %s -> %s, err %v)", rv, got.ResourceVersion, err)
	}
}

func TestSyncFailsClearlyWithoutTheInstallsObjects(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r, err := New(c, c, Options{Secret: types.NamespacedName{Namespace: "ns", Name: "cert"}, WebhookConfiguration: "guard", Hosts: hosts}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(context.Background()); err == nil || !bytes.Contains([]byte(err.Error()), []byte("ns/cert")) {
		t.Errorf("missing Secret: %v", err)
	}
	if _, err := New(c, c, Options{WebhookConfiguration: "guard", Hosts: hosts}, logr.Discard()); err == nil {
		t.Error("New accepts a Secret without a name")
	}
}
