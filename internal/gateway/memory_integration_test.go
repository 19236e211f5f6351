package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

// childGatewayEnv names the file with a childConfig: TestMain then runs a gateway instead of the tests.
const childGatewayEnv = "AIRLOCK_TEST_CHILD_GATEWAY"

// childConfig is what the child gateway needs: the API server (envtest), the key namespace, the exec server
// and the memory limit it must live within.
type childConfig struct {
	Host                      string
	CAData, CertData, KeyData []byte
	KeyNamespace              string
	ExecURL                   string
	MemoryLimit               int64
	PerTenantShare            float64
}

// runChildGateway serves the gateway as cmd/gateway would (memory plan, soft limit, server deadlines) and
// prints "LISTEN addr" once it listens. It runs until killed.
func runChildGateway(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cc childConfig
	if err := json.Unmarshal(b, &cc); err != nil {
		return err
	}
	cfg := &rest.Config{Host: cc.Host, QPS: 1000, Burst: 2000,
		TLSClientConfig: rest.TLSClientConfig{CAData: cc.CAData, CertData: cc.CertData, KeyData: cc.KeyData}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	store := auth.NewStore(kubernetes.NewForConfigOrDie(cfg), cc.KeyNamespace)
	if err := store.Run(context.Background()); err != nil {
		return err
	}
	engine, err := podexec.New(&rest.Config{Host: cc.ExecURL}, podexec.Options{})
	if err != nil {
		return err
	}
	inflight, goLimit := MemoryPlan(cc.MemoryLimit)
	debug.SetMemoryLimit(goLimit)
	s, err := New(Options{Client: c, Engine: engine, Auth: store, MaxExecsPerTenant: 200,
		MaxInflightBytes: inflight, MaxInflightBytesPerTenant: int64(float64(inflight) * cc.PerTenantShare)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("LISTEN %s\n", ln.Addr())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	return srv.Serve(ln)
}

// startChildGateway re-runs the test binary as a gateway (killed with the test, by Pdeathsig and cleanup)
// and returns its URL and pid.
func startChildGateway(t *testing.T, cc childConfig) (string, int) {
	t.Helper()
	b, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "child.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childGatewayEnv+"="+cfgPath)
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("child gateway exited before listening")
		}
		return "http://" + a, cmd.Process.Pid
	case <-time.After(60 * time.Second):
		t.Fatal("child gateway did not start listening within 60s")
	}
	return "", 0
}

// peakRSS is the child's high-water resident set (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// slowBody trickles n bytes in pieces, as a slow client uploads.
type slowBody struct {
	left  int
	piece int
	pause time.Duration
}

func (s *slowBody) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	n := min(len(p), s.piece, s.left)
	for i := range p[:n] {
		p[i] = 'u'
	}
	s.left -= n
	return n, nil
}

// The gateway's memory is bounded whatever a tenant sends. A gateway in a child process, planned for a
// 256 MiB limit (GOMEMLIMIT unset: it sets its own soft limit as cmd/gateway does), takes 50 concurrent
// commands of one tenant, each asking for the largest budget with output that escapes badly (stdout \x01,
// six bytes in JSON; stderr '<', six with HTML escaping), and 50 slow uploads of the same tenant, while
// another tenant's ordinary commands must keep succeeding. Every call gets a result or a clear 429/503, and
// the child's peak RSS stays under 256 MiB. Scaled for 2 shared cores: 8 MB per stream, not 40 MB (the kept
// output is bounded by the budget either way; more output only takes longer). The heavy tenant's share is
// raised to 3/4 of the budget so that the load reaches the gateway's total, not just the default quarter.
//
// Verified to fail with the protection removed: with MaxInflightBytes < 0 (no budget) the same load drove
// the child's peak RSS to 264 MiB (all 50 commands ran at once); with it, 148 MiB (16 ran, 34 got 429).
func TestIntegrationMemoryBounded(t *testing.T) {
	const (
		memLimit = 256 << 20
		calls    = 50
		uploads  = 50
		perCall  = 8_000_000 // bytes per stream
		upload   = 2 << 20
	)
	g := newGateway(t, nil)
	nsA, keyA := g.tenant(t, 20)
	nsB, keyB := g.tenant(t, 20)
	wdA := t.TempDir()
	idA := g.readySandbox(t, nsA, wdA)
	idB := g.readySandbox(t, nsB, t.TempDir())

	cfg := startEnv(t)
	url, pid := startChildGateway(t, childConfig{Host: cfg.Host, CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData,
		KeyNamespace: g.keyNS, ExecURL: g.exec.URL, MemoryLimit: memLimit, PerTenantShare: 0.75})
	post := func(key, path string, body io.Reader, method string) (int, map[string]any, error) {
		req, err := http.NewRequest(method, url+path, body)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s %s: %d, body: %w", method, path, resp.StatusCode, err)
		}
		if resp.StatusCode == 429 || resp.StatusCode == 503 {
			if resp.Header.Get("Retry-After") == "" && errCode(m) != CodeTooManyExecs {
				return resp.StatusCode, m, fmt.Errorf("%d %s without Retry-After", resp.StatusCode, errCode(m))
			}
		}
		return resp.StatusCode, m, nil
	}

	heavy := fmt.Sprintf(`{"argv": ["sh", "-c", "head -c %d /dev/zero | tr '\\0' '\\1'; head -c %d /dev/zero | tr '\\0' '<' >&2"], "max_output_bytes": %d, "timeout_ms": 120000}`,
		perCall, perCall, MaxInlineOutput)
	type outcome struct {
		kind string // exec or upload
		code int
		err  error
	}
	results := make(chan outcome, calls+uploads)
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, m, err := post(keyA, "/v1/sandboxes/"+idA+"/exec", strings.NewReader(heavy), "POST")
			if err == nil && code == 200 {
				so, _ := m["stdout"].(string)
				if m["outcome"] != "exited" || m["truncated"] != true || len(so) > MaxInlineOutput+256 {
					err = fmt.Errorf("exec result: outcome %v truncated %v stdout %d chars", m["outcome"], m["truncated"], len(so))
				}
			}
			results <- outcome{"exec", code, err}
		}()
	}
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := &slowBody{left: upload, piece: 64 << 10, pause: 40 * time.Millisecond}
			code, m, err := post(keyA, fmt.Sprintf("/v1/sandboxes/%s/files?path=up-%d", idA, i), body, "PUT")
			if err == nil && code == 200 && m["bytes"] != float64(upload) {
				err = fmt.Errorf("upload: %v", m)
			}
			results <- outcome{"upload", code, err}
		}()
	}
	// Meanwhile the other tenant's ordinary commands succeed.
	normal := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		case <-time.After(500 * time.Millisecond):
			code, m, err := post(keyB, "/v1/sandboxes/"+idB+"/exec", strings.NewReader(`{"command": "echo ok"}`), "POST")
			if err != nil || code != 200 || m["stdout"] != "ok\n" {
				t.Errorf("the other tenant's command: %d %v %v", code, m, err)
			}
			normal++
		}
	}
	close(results)
	counts := map[string]int{}
	for r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", r.kind, r.err)
			continue
		}
		if r.code != 200 && r.code != 429 && r.code != 503 {
			t.Errorf("%s: status %d", r.kind, r.code)
		}
		counts[fmt.Sprintf("%s %d", r.kind, r.code)]++
	}
	rss, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child peak RSS %d MiB (limit %d MiB); calls %v; %d ordinary calls of the other tenant", rss>>20, memLimit>>20, counts, normal)
	if rss >= memLimit {
		t.Fatalf("peak RSS %d MiB is over the %d MiB limit", rss>>20, memLimit>>20)
	}
	if normal == 0 || counts["exec 200"] == 0 || counts["upload 200"] == 0 {
		t.Fatalf("the load did not run: %v, %d ordinary calls", counts, normal)
	}
}
