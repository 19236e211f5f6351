// Package certs gives the manager's webhook server a serving certificate without cert-manager: a CA and a
// serving certificate signed by it are kept in one Secret (created empty by the install, so the manager needs
// no create permission on Secrets), and the CA is injected as caBundle into every webhook of one named
// ValidatingWebhookConfiguration (created by the install, so the manager may patch that one object only).
// Every replica serves webhooks, so every replica runs this; the Secret's resourceVersion settles races.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the Secret.
const (
	CACertKey = "ca.crt"
	caKeyKey  = "ca.key"
	certKey   = "tls.crt"
	keyKey    = "tls.key"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	caRenew      = 365 * 24 * time.Hour // a new CA this long before the old one expires
	certValidity = 365 * 24 * time.Hour
	certRenew    = 90 * 24 * time.Hour
	// resync re-reads the Secret (another replica may have rotated it) and re-injects a caBundle an
	// `helm upgrade --force` or a hand edit removed: two GETs a minute.
	resync     = time.Minute
	retryFirst = time.Second
)

// Options name the objects the Rotator keeps current.
type Options struct {
	// Secret holds the CA and the serving certificate. It must exist; its data is the Rotator's.
	Secret types.NamespacedName
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose webhooks get the CA as caBundle.
	WebhookConfiguration string
	// Hosts are the DNS names and IP addresses the serving certificate is valid for: the Service's
	// <name>.<namespace>.svc in a cluster, the host in a clientConfig.url otherwise.
	Hosts []string
}

// Rotator issues, renews and serves the certificate and injects the CA. It is a manager Runnable that runs on
// every replica, leader or not.
type Rotator struct {
	reader   client.Reader // live reads: the manager's cache holds neither Secrets nor webhook configurations
	writer   client.Writer
	opts     Options
	log      logr.Logger
	cert     atomic.Pointer[tls.Certificate]
	injected atomic.Bool
}

// New checks the options; reader should be the manager's API reader, writer its client.
func New(reader client.Reader, writer client.Writer, opts Options, log logr.Logger) (*Rotator, error) {
	switch {
	case opts.Secret.Namespace == "" || opts.Secret.Name == "":
		return nil, errors.New("the certificate Secret needs a namespace and a name")
	case opts.WebhookConfiguration == "":
		return nil, errors.New("the webhook configuration needs a name")
	case len(opts.Hosts) == 0:
		return nil, errors.New("the serving certificate needs at least one host name or IP address")
	}
	return &Rotator{reader: reader, writer: writer, opts: opts, log: log}, nil
}

// NeedLeaderElection is false: standby replicas serve webhooks too.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start keeps the certificate and the caBundle current until ctx ends. Errors are logged and retried (with
// backoff up to the resync interval); until the first success the replica is not ready.
func (r *Rotator) Start(ctx context.Context) error {
	wait := retryFirst
	for {
		if err := r.Sync(ctx); err != nil {
			r.log.Error(err, "webhook certificate not current; retrying", "in", wait)
		} else {
			wait = resync
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if wait < resync {
			wait = min(2*wait, resync)
		}
	}
}

// Sync issues or renews the certificate if needed, loads it for serving and injects the CA once.
func (r *Rotator) Sync(ctx context.Context) error {
	sec := &corev1.Secret{}
	if err := r.reader.Get(ctx, r.opts.Secret, sec); err != nil {
		return fmt.Errorf("reading certificate Secret %s (the install creates it): %w", r.opts.Secret, err)
	}
	data, changed, err := issue(sec.Data, r.opts.Hosts, time.Now())
	if err != nil {
		return err
	}
	if changed {
		sec.Data = data
		// The read's resourceVersion makes this conditional: a replica that loses a race re-reads the winner's.
		if err := r.writer.Update(ctx, sec); err != nil {
			return fmt.Errorf("storing the webhook certificate in Secret %s: %w", r.opts.Secret, err)
		}
		r.log.Info("issued webhook serving certificate", "secret", r.opts.Secret.String(), "hosts", r.opts.Hosts)
	}
	cert, err := tls.X509KeyPair(data[certKey], data[keyKey])
	if err != nil {
		return fmt.Errorf("loading the webhook certificate: %w", err)
	}
	r.cert.Store(&cert)
	if err := r.inject(ctx, data[CACertKey]); err != nil {
		return err
	}
	r.injected.Store(true)
	return nil
}

// inject sets caBundle on every webhook of the configuration that lacks this CA.
func (r *Rotator) inject(ctx context.Context, ca []byte) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: r.opts.WebhookConfiguration}, vwc); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s (the install creates it): %w", r.opts.WebhookConfiguration, err)
	}
	if len(vwc.Webhooks) == 0 {
		return fmt.Errorf("ValidatingWebhookConfiguration %s has no webhooks", r.opts.WebhookConfiguration)
	}
	orig := vwc.DeepCopy()
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, ca) {
			vwc.Webhooks[i].ClientConfig.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	// Strategic merge keys webhooks by name, so the patch carries only caBundle; the lock refuses to apply it
	// over a configuration changed since the read.
	if err := r.writer.Patch(ctx, vwc, client.StrategicMergeFrom(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("injecting the CA into ValidatingWebhookConfiguration %s: %w", r.opts.WebhookConfiguration, err)
	}
	r.log.Info("injected webhook CA bundle", "configuration", r.opts.WebhookConfiguration)
	return nil
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook serving certificate not issued yet")
}

// ReadyCheck fails until a certificate is served and the API server has been given its CA (healthz.Checker).
func (r *Rotator) ReadyCheck(*http.Request) error {
	if r.cert.Load() == nil || !r.injected.Load() {
		return errors.New("webhook certificate not issued or CA not injected yet")
	}
	return nil
}

// issue returns the Secret data with a CA valid for at least caRenew and a serving certificate signed by it,
// valid for every host and for at least certRenew, reusing what data already holds; changed reports whether
// anything was issued.
func issue(data map[string][]byte, hosts []string, now time.Time) (out map[string][]byte, changed bool, err error) {
	ca, caKey := parseCA(data, now)
	if ca != nil && validServing(data, ca, hosts, now) {
		return data, false, nil
	}
	out = map[string][]byte{}
	if ca == nil {
		if ca, caKey, err = newCA(now); err != nil {
			return nil, false, err
		}
		out[CACertKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
		if out[caKeyKey], err = encodeKey(caKey); err != nil {
			return nil, false, err
		}
	} else {
		out[CACertKey], out[caKeyKey] = data[CACertKey], data[caKeyKey]
	}
	if out[certKey], out[keyKey], err = newServing(ca, caKey, hosts, now); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// parseCA returns the stored CA if it parses, is a CA, matches its key and stays valid for caRenew.
func parseCA(data map[string][]byte, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	pair, err := tls.X509KeyPair(data[CACertKey], data[caKeyKey])
	if err != nil {
		return nil, nil
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if err != nil || !ok || !ca.IsCA || now.Add(caRenew).After(ca.NotAfter) {
		return nil, nil
	}
	return ca, key
}

// validServing reports whether the stored serving certificate matches its key, chains to ca and covers hosts
// for at least certRenew.
func validServing(data map[string][]byte, ca *x509.Certificate, hosts []string, now time.Time) bool {
	pair, err := tls.X509KeyPair(data[certKey], data[keyKey])
	if err != nil {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Add(certRenew).After(cert.NotAfter) {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "airlock-webhook-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between nodes
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return ca, key, nil
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating serving key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return n, nil
}
