package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// metricsServer serves metrics at /metrics over HTTPS and only to callers the API server authenticates
// (TokenReview) and authorizes for GET /metrics (SubjectAccessReview; ClusterRole airlock-metrics-reader): the
// manager's filter (cmd/manager/metrics.go), so the metrics, which name tenants, are no one else's to read.
// cfg is the gateway's own identity, which needs tokenreviews and subjectaccessreviews create.
type metricsServer struct {
	srv     *http.Server
	watcher *certwatcher.CertWatcher // nil: a self-signed certificate made at start
}

// newMetricsServer builds the server for addr; certDir holds tls.crt and tls.key ("": self-signed, as the
// manager's, so scrapers skip verification).
func newMetricsServer(cfg *rest.Config, addr, certDir string, metrics http.Handler, log logr.Logger) (*metricsServer, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics: http client: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics: authorization filter: %w", err)
	}
	h, err := filter(log, metrics)
	if err != nil {
		return nil, fmt.Errorf("metrics: authorization filter: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	// HTTP/1.1 only: HTTP/2's stream handling was behind the Rapid Reset and Stream Cancellation CVEs.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	m := &metricsServer{srv: &http.Server{Addr: addr, Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}}
	if certDir != "" {
		if m.watcher, err = certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")); err != nil {
			return nil, fmt.Errorf("--metrics-cert-dir: %w", err)
		}
		tc.GetCertificate = m.watcher.GetCertificate
		return m, nil
	}
	cert, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		return nil, fmt.Errorf("metrics: self-signed certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("metrics: self-signed certificate: %w", err)
	}
	tc.Certificates = []tls.Certificate{pair}
	return m, nil
}

// serve listens until ctx ends (a provided certificate is reloaded when its files change), then closes; it
// returns only a failure to serve.
func (m *metricsServer) serve(ctx context.Context) error {
	if m.watcher != nil {
		go func() { _ = m.watcher.Start(ctx) }()
	}
	go func() {
		<-ctx.Done()
		_ = m.srv.Close()
	}()
	if err := m.srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics listen %s: %w", m.srv.Addr, err)
	}
	return nil
}
