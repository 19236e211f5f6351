package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	airlockexec "airlock.dev/airlock/internal/exec"
)

// BenchmarkExecTrue runs `true` in one gVisor sandbox, one call at a time, four ways in the same run: plain
// client-go remotecommand (the floor), the exec engine (adds the in-sandbox wrapper: process group, timeout,
// output capture, trailer), the gateway over HTTP, and `kubectl exec`. Then 20 concurrent calls through the
// gateway. Reports medians and ratios. Run: make bench-e2e.
func BenchmarkExecTrue(b *testing.B) {
	const rounds = 20
	for b.Loop() {
		g := gateway(b)
		ns, key := gatewayTenant(b, 20)
		_, created := g.call(b, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
		id, _ := created["id"].(string)
		if id == "" {
			b.Fatalf("create: %v", created)
		}
		rc, err := restClient()
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		ways := []struct {
			name string
			run  func() error
		}{
			{"client-go", func() error { return rawExec(ctx, rc, ns, id) }},
			{"engine", func() error {
				res, err := engine.Run(ctx, airlockexec.Request{Namespace: ns, Pod: id, Container: "sandbox", Argv: []string{"true"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				return err
			}},
			{"gateway", func() error {
				status, res := g.call(b, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
				if status != http.StatusOK || res["exit_code"] != float64(0) {
					return fmt.Errorf("status %d %v", status, res)
				}
				return nil
			}},
			{"kubectl", func() error {
				return exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "-n", ns, "exec", id, "-c", "sandbox", "--", "true").Run()
			}},
		}
		medians := map[string]time.Duration{}
		for _, w := range ways {
			var d []time.Duration
			for range rounds {
				start := time.Now()
				if err := w.run(); err != nil {
					b.Fatalf("%s: %v", w.name, err)
				}
				d = append(d, time.Since(start))
			}
			medians[w.name] = median(d)
			b.ReportMetric(float64(medians[w.name].Milliseconds()), w.name+"-ms")
		}
		for _, w := range []string{"engine", "gateway", "kubectl"} {
			b.ReportMetric(medians[w].Seconds()/medians["client-go"].Seconds(), w+"/client-go")
		}

		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() {
				status, res, err := g.try(key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
				if err != nil {
					errs <- err
				} else if status != http.StatusOK {
					errs <- fmt.Errorf("status %d %v", status, res)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("concurrent exec: %v", err)
		}
		conc := time.Since(start)
		b.ReportMetric(conc.Seconds(), "20-concurrent-s")
		b.Logf("medians over %d calls: client-go %s, engine %s, gateway %s, kubectl %s; 20 concurrent via gateway %s",
			rounds, medians["client-go"], medians["engine"], medians["gateway"], medians["kubectl"], conc.Round(time.Millisecond))
	}
}

func rawExec(ctx context.Context, rc rest.Interface, ns, pod string) error {
	req := rc.Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: []string{"true"}, Stdout: true, Stderr: true}, kscheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	var out bytes.Buffer
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
}

// restClient is a plain core/v1 REST client for building exec URLs.
func restClient() (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = kscheme.Codecs.WithoutConversion()
	return rest.RESTClientFor(c)
}
