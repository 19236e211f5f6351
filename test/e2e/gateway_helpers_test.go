package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
	"airlock.dev/airlock/internal/testutil/child"
)

var gatewayBin = os.Getenv("AIRLOCK_E2E_GATEWAY")

const keyNamespace = "airlock-e2e-keys"

// gatewayProc is the gateway binary run out of cluster, listening on loopback; the test stops it by the PID it
// started.
type gatewayProc struct {
	cmd  *exec.Cmd
	base string
}

var (
	gwOnce sync.Once
	gw     *gatewayProc
	gwErr  error
)

// gateway starts the shared gateway once for the run. Creation is not rate limited here so that the quota
// test can race 50 creates.
func gateway(t testing.TB) *gatewayProc {
	t.Helper()
	gwOnce.Do(func() { gw, gwErr = startGateway() })
	if gwErr != nil {
		t.Fatalf("gateway: %v", gwErr)
	}
	return gw
}

// startGateway starts a gateway process (dies with the test binary) and waits until it is healthy; extra
// flags are added to the e2e defaults.
func startGateway(extra ...string) (*gatewayProc, error) {
	if gatewayBin == "" {
		return nil, fmt.Errorf("AIRLOCK_E2E_GATEWAY is not set: run 'make test-e2e'")
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keyNamespace}}
	if err := k8s.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.CreateTemp("", fmt.Sprintf("airlock-e2e-gateway-%d-*.log", os.Getpid()))
	if err != nil {
		return nil, err
	}
	addRunFile(logf.Name(), true)
	args := append([]string{"--kubeconfig", kubeconfig, "--listen", addr, "--key-namespace", keyNamespace,
		"--default-template", "python-node", "--create-rate=-1", "--max-concurrent-execs=20", "--metrics-listen=127.0.0.1:0"}, extra...)
	cmd := child.DieWithParent(exec.Command(gatewayBin, args...))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProc{cmd: cmd, base: "http://" + addr}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(g.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
	}
	g.stop()
	return nil, fmt.Errorf("gateway not healthy after 30s (log %s)", logf.Name())
}

func (g *gatewayProc) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = g.cmd.Process.Kill()
	}
}

// resetPeak resets the gateway's peak resident memory (VmHWM) to its current RSS, so that a later peak
// measures what happened since, not the start-up or an earlier test.
func (g *gatewayProc) resetPeak(t testing.TB) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", g.cmd.Process.Pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the gateway's peak RSS: %v", err)
	}
}

// rss returns the gateway's current and peak resident memory from /proc.
func (g *gatewayProc) rss(t testing.TB) (now, peak int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading gateway status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			now = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return now, peak
}

// tenant creates a gateway tenant (restricted namespace + sandbox quota) with the python-node template and an
// API key for it.
func gatewayTenant(t testing.TB, maxSandboxes int64) (ns, key string) {
	t.Helper()
	ctx := context.Background()
	ns = fmt.Sprintf("gw-%d", time.Now().UnixNano()%1_000_000_000)
	if err := admin.CreateTenant(ctx, k8s, ns, admin.TenantOptions{MaxSandboxes: maxSandboxes}); err != nil {
		t.Fatalf("creating tenant: %v", err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns) })
	tpl := &airlockv1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "python-node"},
		Spec: airlockv1.SandboxTemplateSpec{Image: sandboxImage, RuntimeClassName: "gvisor"}}
	if err := k8s.Create(ctx, tpl); err != nil {
		t.Fatalf("creating template: %v", err)
	}
	key, _, err := admin.CreateKey(ctx, k8s, keyNamespace, ns, "e2e")
	if err != nil {
		t.Fatalf("creating key: %v", err)
	}
	return ns, key
}

// call sends a JSON request to the gateway and decodes the JSON answer into a map.
func (g *gatewayProc) call(t testing.TB, key, method, path string, body any) (int, map[string]any) {
	t.Helper()
	status, out, err := g.try(key, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, out
}

// try is call for other goroutines than the test's: it returns errors instead of failing the test.
func (g *gatewayProc) try(key, method, path string, body any) (int, map[string]any, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	status, raw, err := g.tryRaw(key, method, path, "application/json", r)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return status, nil, fmt.Errorf("%s %s: status %d, body is not JSON: %w: %.300s", method, path, status, err, raw)
		}
	}
	return status, out, nil
}

func (g *gatewayProc) raw(t testing.TB, key, method, path, contentType string, body io.Reader) (int, []byte) {
	t.Helper()
	status, raw, err := g.tryRaw(key, method, path, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, raw
}

func (g *gatewayProc) tryRaw(key, method, path, contentType string, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequest(method, g.base+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", contentType)
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: reading body: %w", method, path, err)
	}
	return resp.StatusCode, raw, nil
}

// execCmd runs a shell command through the gateway and returns the decoded result; it fails on a non-200.
func (g *gatewayProc) execCmd(t testing.TB, key, id, command string, timeoutMS int) map[string]any {
	t.Helper()
	status, res := g.call(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": command, "timeout_ms": timeoutMS})
	if status != http.StatusOK {
		t.Fatalf("exec %q: status %d: %v", command, status, res)
	}
	return res
}

// str returns m[k] as a string, failing the test (not panicking) when the response lacks it.
func str(t testing.TB, m map[string]any, k string) string {
	t.Helper()
	v, ok := m[k].(string)
	if !ok {
		t.Fatalf("response field %q is %T (%v), want a string; response: %v", k, m[k], m[k], m)
	}
	return v
}
