package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/sandbox"
)

// ProxyLocator reads where the egress proxy is from its Service: the ClusterIP and port for the sandboxes'
// HTTP_PROXY, the selector and target port for their NetworkPolicy. It reads past the cache (one Service is
// all it needs, not a cluster-wide watch) and keeps the answer for a short while.
type ProxyLocator struct {
	Reader  client.Reader
	Service types.NamespacedName
	// TTL is how long an answer is reused.
	TTL time.Duration

	mu     sync.Mutex
	cached *sandbox.EgressProxy
	at     time.Time
}

// Locate returns the proxy, or an error that says what is wrong with its Service.
func (l *ProxyLocator) Locate(ctx context.Context, now time.Time) (*sandbox.EgressProxy, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cached != nil && now.Sub(l.at) < l.TTL {
		return l.cached, nil
	}
	svc := &corev1.Service{}
	if err := l.Reader.Get(ctx, l.Service, svc); err != nil {
		return nil, fmt.Errorf("reading the egress proxy's Service %s: %w", l.Service, err)
	}
	p, err := proxyFromService(svc)
	if err != nil {
		return nil, fmt.Errorf("%w: the egress proxy's Service %s %w", errProxyUnusable, l.Service, err)
	}
	l.cached, l.at = p, now
	return p, nil
}

// errProxyUnusable marks a proxy Service that exists but cannot be used as it is.
var errProxyUnusable = errors.New("egress proxy unusable")

// proxyFromService takes the Service's only port (or the one named "proxy"), which must target a port number.
func proxyFromService(svc *corev1.Service) (*sandbox.EgressProxy, error) {
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone || net.ParseIP(ip) == nil {
		return nil, fmt.Errorf("has no cluster IP (%q): sandboxes have no DNS and reach the proxy by its IP", ip)
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, fmt.Errorf("has no selector, so the proxy's pods cannot be named in the sandboxes' NetworkPolicy")
	}
	var port *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if p := &svc.Spec.Ports[i]; p.Name == "proxy" || len(svc.Spec.Ports) == 1 {
			port = p
		}
	}
	if port == nil {
		return nil, fmt.Errorf("has no port named proxy")
	}
	target := port.TargetPort.IntVal
	if port.TargetPort.StrVal != "" {
		return nil, fmt.Errorf("port %d targets the named port %q: give a number, which the sandboxes' NetworkPolicy needs", port.Port, port.TargetPort.StrVal)
	}
	if target == 0 {
		target = port.Port
	}
	return &sandbox.EgressProxy{
		Address:   net.JoinHostPort(ip, strconv.Itoa(int(port.Port))),
		Namespace: svc.Namespace,
		PodLabels: svc.Spec.Selector,
		PodPort:   target,
	}, nil
}
