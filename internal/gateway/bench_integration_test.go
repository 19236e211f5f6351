package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/sandbox"
)

// BenchmarkExecTrue compares `true` through the gateway's HTTP handler (auth, sandbox lookup against envtest,
// JSON) with the engine called directly, both against the local exec server. Run with KUBEBUILDER_ASSETS set:
//
//	go test ./internal/gateway -run '^$' -bench ExecTrue
func BenchmarkExecTrue(b *testing.B) {
	g := newGateway(b, func(o *Options) { o.MaxExecsPerTenant = -1 })
	ns, key := g.tenant(b, 20)
	id := g.readySandbox(b, ns, b.TempDir())
	engine, err := podexec.New(g.exec.RESTConfig(), podexec.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			res, err := engine.Run(context.Background(), podexec.Request{Namespace: ns, Pod: id, Container: sandbox.ContainerName, Argv: []string{"true"}})
			if err != nil || res.Outcome != podexec.OutcomeExited {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
	b.Run("gateway-http", func(b *testing.B) {
		req, _ := http.NewRequest("POST", g.http.URL+"/v1/sandboxes/"+id+"/exec", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		for b.Loop() {
			req.Body = http.NoBody
			r2 := req.Clone(context.Background())
			r2.Body = readCloser(`{"argv": ["true"]}`)
			resp, err := http.DefaultClient.Do(r2)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%v %v", err, resp)
			}
			_ = resp.Body.Close()
		}
	})
}

type rc struct{ *strings.Reader }

func (rc) Close() error { return nil }

func readCloser(s string) rc { return rc{strings.NewReader(s)} }
