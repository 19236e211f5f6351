package e2e

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// TestClusterTrafficBypassesProxy: with an HTTP(S) proxy configured on the machine, kubectl (and every other
// client started from `hack/local-cluster.sh env`, as this suite is) still talks to the cluster directly.
// The "proxy" is a listener on loopback that only counts connections. The control run without the cluster's
// NO_PROXY shows that kubectl would otherwise go through it (and fail).
func TestClusterTrafficBypassesProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	proxy := "http://" + l.Addr().String()
	kubectl := func(noProxy bool) (string, error) {
		var env []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			switch strings.ToUpper(k) {
			case "HTTP_PROXY", "HTTPS_PROXY":
				continue
			case "NO_PROXY":
				if !noProxy {
					continue
				}
			}
			env = append(env, kv)
		}
		env = append(env, "HTTPS_PROXY="+proxy, "https_proxy="+proxy, "HTTP_PROXY="+proxy, "http_proxy="+proxy)
		cmd := exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "get", "--raw", "/readyz", "--request-timeout=10s")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if !strings.Contains(os.Getenv("NO_PROXY"), nodeIP) {
		t.Fatalf("NO_PROXY %q does not cover the node IP %s: run 'make test-e2e' (hack/local-cluster.sh env sets it)", os.Getenv("NO_PROXY"), nodeIP)
	}
	if out, err := kubectl(true); err != nil || strings.TrimSpace(out) != "ok" || conns.Load() != 0 {
		t.Fatalf("with the cluster's NO_PROXY: kubectl %v %q, %d connections to the proxy (want ok, 0)", err, out, conns.Load())
	}
	if out, err := kubectl(false); err == nil || conns.Load() == 0 {
		t.Fatalf("control without NO_PROXY: kubectl %v %q, %d connections to the proxy: the proxy was not used, so the check above proves nothing", err, out, conns.Load())
	}
}
