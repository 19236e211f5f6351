package main

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsOptions serves /metrics over HTTPS and only to callers the API server authenticates (TokenReview) and
// authorizes for GET /metrics (SubjectAccessReview; ClusterRole airlock-metrics-reader), as kubebuilder's
// scaffold does. Without a certificate controller-runtime generates a self-signed one in memory.
func metricsOptions(addr string) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		// HTTP/1.1 only: HTTP/2's stream handling was behind the Rapid Reset and Stream Cancellation CVEs.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}
