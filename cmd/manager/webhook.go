package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"airlock.dev/airlock/internal/webhook/certs"
	"airlock.dev/airlock/internal/webhook/execguard"
)

// webhookFlags configure the exec guard: the admission webhook the manager serves, with a certificate it
// issues itself into a Secret and injects into a ValidatingWebhookConfiguration that the install creates.
type webhookFlags struct {
	enabled                     bool
	bindAddress, secret, config string
	hosts                       string

	certOpts certs.Options
	rotator  *certs.Rotator // made in setup, before the server starts
}

func (w *webhookFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&w.enabled, "exec-webhook", false, "Serve the exec guard: an admission webhook that admits the gateway's pods/exec only into Sandbox pods (needs the --webhook-* flags).")
	fs.StringVar(&w.bindAddress, "webhook-bind-address", ":9443", "Address the exec guard's HTTPS server binds to.")
	fs.StringVar(&w.secret, "webhook-cert-secret", "", "NAMESPACE/NAME of the existing Secret the manager keeps the webhook's CA and serving certificate in.")
	fs.StringVar(&w.config, "webhook-config-name", "", "ValidatingWebhookConfiguration (created by the install) whose webhooks get the CA as caBundle.")
	fs.StringVar(&w.hosts, "webhook-cert-hosts", "", "Comma-separated DNS names and IP addresses the serving certificate is for: the Service's <name>.<namespace>.svc, or the host of a clientConfig.url.")
}

// server validates the flags and returns the webhook server for ctrl.Options, or nil when the guard is off
// (the manager then never starts one).
func (w *webhookFlags) server() (webhook.Server, error) {
	if !w.enabled {
		return nil, nil
	}
	host, portStr, err := net.SplitHostPort(w.bindAddress)
	if err != nil {
		return nil, fmt.Errorf("--webhook-bind-address: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("--webhook-bind-address: invalid port %q", portStr)
	}
	ns, name, ok := strings.Cut(w.secret, "/")
	if !ok || ns == "" || name == "" {
		return nil, errors.New("--webhook-cert-secret must be NAMESPACE/NAME")
	}
	w.certOpts = certs.Options{Secret: types.NamespacedName{Namespace: ns, Name: name}, WebhookConfiguration: w.config, Hosts: splitList(w.hosts)}
	if _, err := certs.New(nil, nil, w.certOpts, ctrl.Log); err != nil {
		return nil, fmt.Errorf("exec webhook: %w", err)
	}
	return webhook.NewServer(webhook.Options{Host: host, Port: port, TLSOpts: []func(*tls.Config){func(c *tls.Config) {
		c.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return w.rotator.GetCertificate(h) }
		c.NextProtos = []string{"http/1.1"} // no HTTP/2: it only adds attack surface (rapid reset) here
	}}}), nil
}

// setup registers the guard and the rotator with mgr, and makes readiness wait for the certificate.
func (w *webhookFlags) setup(mgr ctrl.Manager) error {
	if !w.enabled {
		return nil
	}
	var err error
	if w.rotator, err = certs.New(mgr.GetAPIReader(), mgr.GetClient(), w.certOpts, ctrl.Log.WithName("webhook-certs")); err != nil {
		return err
	}
	if err := mgr.Add(w.rotator); err != nil {
		return fmt.Errorf("adding webhook certificate rotator: %w", err)
	}
	srv := mgr.GetWebhookServer()
	srv.Register(execguard.Path, &webhook.Admission{Handler: &execguard.Guard{Reader: mgr.GetAPIReader()}})
	if err := mgr.AddReadyzCheck("webhook-certificate", w.rotator.ReadyCheck); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook-server", srv.StartedChecker())
}
