package main

import (
	"flag"
	"strings"
	"testing"
)

func TestWebhookFlags(t *testing.T) {
	good := []string{"--exec-webhook", "--webhook-cert-secret=airlock-system/cert", "--webhook-config-name=guard", "--webhook-cert-hosts=svc.ns.svc,127.0.0.1"}
	for _, c := range []struct {
		args []string
		want string // "" means valid
	}{
		{nil, ""},
		{good, ""},
		{append(good, "--webhook-bind-address=9443"), "--webhook-bind-address"},
		{append(good, "--webhook-bind-address=:0"), "invalid port"},
		{append(good, "--webhook-cert-secret=cert"), "NAMESPACE/NAME"},
		{append(good, "--webhook-config-name="), "webhook configuration needs a name"},
		{append(good, "--webhook-cert-hosts= , "), "at least one host"},
	} {
		var w webhookFlags
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		w.bind(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		srv, err := w.server()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want == "" && (srv == nil) == w.enabled:
			t.Errorf("%v: server %v with the guard enabled=%v", c.args, srv, w.enabled)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
