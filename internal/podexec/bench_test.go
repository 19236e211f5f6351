package podexec

import (
	"io"
	"net/http"
	"testing"

	"k8s.io/client-go/tools/remotecommand"
)

// Engine (wrapper, trailer, budget) vs plain client-go remotecommand against
// the same local server, in the same run:
//
//	go test ./internal/podexec -run '^$' -bench . -benchtime 20x
func BenchmarkExecTrue(b *testing.B) {
	benchBoth(b, Request{Argv: []string{"true"}}, 0)
}

func BenchmarkExecStdout100MB(b *testing.B) {
	benchBoth(b, Request{Shell: "yes | head -c 100M"}, 100<<20)
}

func benchBoth(b *testing.B, req Request, bytes int64) {
	for _, p := range []Protocol{ProtocolWebSocket, ProtocolSPDY} {
		env := newEnv(b, p, nil)
		req.Namespace, req.Pod, req.SupervisorKey = "ns", "p", env.srv.SupervisorKey()
		b.Run(string(p)+"/engine", func(b *testing.B) {
			b.SetBytes(bytes)
			for b.Loop() {
				res, err := env.eng.Run(b.Context(), req)
				if err != nil || res.Outcome != OutcomeExited || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
		b.Run(string(p)+"/client-go", func(b *testing.B) {
			argv := req.Argv
			if req.Shell != "" {
				argv = []string{"sh", "-c", req.Shell}
			}
			u, err := execURL(env.srv.RESTConfig(), &req, argv)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bytes)
			for b.Loop() {
				var ex remotecommand.Executor
				if p == ProtocolSPDY {
					ex, err = remotecommand.NewSPDYExecutor(env.srv.RESTConfig(), http.MethodPost, u)
				} else {
					ex, err = remotecommand.NewWebSocketExecutor(env.srv.RESTConfig(), http.MethodGet, u.String())
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := ex.StreamWithContext(b.Context(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
