package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/gateway/admin"
)

// TestGatewayAgentLoop is the loop an agent runs: create, write code, run it, read the traceback, fix, re-run,
// delete — over the gateway's HTTP API with an API key, against real gVisor pods.
func TestGatewayAgentLoop(t *testing.T) {
	g := gateway(t)
	_, key := gatewayTenant(t, 20)

	status, created := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
	if status != http.StatusCreated || created["id"] == nil {
		t.Fatalf("create: status %d %v", status, created)
	}
	id := str(t, created, "id")
	if created["status"] != "ready" {
		t.Fatalf("create waits until Ready by default: %v", created)
	}

	buggy := "prices = {'apple': 3}\nprint(prices['pear'])\n"
	if status, body := g.raw(t, key, "PUT", "/v1/sandboxes/"+id+"/files?path=solve.py", "application/octet-stream", strings.NewReader(buggy)); status != http.StatusOK && status != http.StatusCreated && status != http.StatusNoContent {
		t.Fatalf("upload: status %d %s", status, body)
	}
	res := g.execCmd(t, key, id, "python3 solve.py", 30000)
	if res["exit_code"] != float64(1) || !strings.Contains(str(t, res, "stderr"), "KeyError: 'pear'") || res["outcome"] != "exited" {
		t.Fatalf("want exit 1 with KeyError on stderr, got %v", res)
	}
	t.Logf("model sees: exit_code=%v stderr=%q", res["exit_code"], res["stderr"])

	fixed := "prices = {'apple': 3}\nprint(prices.get('pear', 0))\n"
	g.raw(t, key, "PUT", "/v1/sandboxes/"+id+"/files?path=solve.py", "application/octet-stream", strings.NewReader(fixed))
	res = g.execCmd(t, key, id, "python3 solve.py", 30000)
	if res["exit_code"] != float64(0) || res["stdout"] != "0\n" || res["truncated"] != false {
		t.Fatalf("fixed run: %v", res)
	}
	if _, ok := res["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms missing: %v", res)
	}
	if status, body := g.raw(t, key, "GET", "/v1/sandboxes/"+id+"/files?path=solve.py", "", nil); status != http.StatusOK || string(body) != fixed {
		t.Errorf("download: status %d %q", status, body)
	}

	if status, _ := g.call(t, key, "DELETE", "/v1/sandboxes/"+id, nil); status != http.StatusOK {
		t.Fatalf("delete: status %d", status)
	}
	eventually(t, time.Minute, "sandbox gone", func() error {
		if status, _ := g.call(t, key, "GET", "/v1/sandboxes/"+id, nil); status != http.StatusNotFound {
			return fmt.Errorf("status %d", status)
		}
		return nil
	})
}

// TestGatewayTimeoutFloodAndBombs: a timed-out command leaves no process behind; a 100 MB flood keeps the
// gateway's memory bounded and the tail exact; a fork bomb and a memory bomb stay inside the sandbox.
func TestGatewayTimeoutFloodAndBombs(t *testing.T) {
	g := gateway(t)
	_, key := gatewayTenant(t, 20)
	_, created := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
	id := str(t, created, "id")
	if id == "" || created["status"] != "ready" {
		t.Fatalf("create: %v", created)
	}

	res := g.execCmd(t, key, id, "sleep 1000 & sleep 1000; echo never", 2000)
	if res["outcome"] != "timeout" || strings.Contains(str(t, res, "stdout"), "never") {
		t.Fatalf("want outcome timeout, got %v", res)
	}
	ps := g.execCmd(t, key, id, "ps -eo pid,comm --no-headers", 10000)
	if strings.Contains(str(t, ps, "stdout"), "sleep") {
		t.Fatalf("a process survived the timeout:\n%s", ps["stdout"])
	}

	g.resetPeak(t)
	before, _ := g.rss(t)
	res = g.execCmd(t, key, id, "yes | head -c 100000000", 120000)
	_, after := g.rss(t)
	out := str(t, res, "stdout")
	t.Logf("100 MB flood: stdout_bytes=%v kept=%d truncated=%v gateway RSS %d MiB before, peak %d MiB during", res["stdout_bytes"], len(out), res["truncated"], before>>20, after>>20)
	if res["stdout_bytes"] != float64(100_000_000) || res["truncated"] != true || res["exit_code"] != float64(0) {
		t.Fatalf("flood result: %v", summarize(res))
	}
	if !strings.HasSuffix(out, strings.Repeat("y\n", 1000)) || !strings.Contains(out, "omitted") {
		t.Errorf("the kept output must end with the exact tail and carry the omission marker: ...%q", tail(out, 200))
	}
	if grew := after - before; grew > 64<<20 {
		t.Errorf("gateway peak RSS was %d MiB above its RSS before a 100 MB output: memory must stay bounded", grew>>20)
	}

	res = g.execCmd(t, key, id, "bomb() { bomb | bomb & }; bomb", 10000)
	t.Logf("fork bomb: outcome=%v exit=%v stderr tail %q", res["outcome"], res["exit_code"], tail(str(t, res, "stderr"), 200))
	if alive := g.execCmd(t, key, id, "echo alive", 30000); alive["stdout"] != "alive\n" {
		t.Errorf("after the fork bomb the sandbox must still answer, got %v", summarize(alive))
	}

	// The memory bomb gets a sandbox of its own, in case the guard misses it and the runtime kills the sandbox.
	_, created = g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
	id = str(t, created, "id")
	if id == "" || created["status"] != "ready" {
		t.Fatalf("create: %v", created)
	}
	res = g.execCmd(t, key, id, `python3 -c "a = [bytearray(64 << 20) for _ in range(64)]"`, 60000)
	t.Logf("memory bomb: outcome=%v exit=%v signal=%v detail=%v", res["outcome"], res["exit_code"], res["signal"], res["detail"])
	if res["outcome"] != "oom" {
		t.Errorf("a memory bomb must be reported as oom, got %v", summarize(res))
	}
	// PID 1's memory guard kills the bomb before the host's OOM killer would take the sandbox.
	if alive := g.execCmd(t, key, id, "echo alive", 30000); alive["stdout"] != "alive\n" {
		t.Errorf("after the memory bomb the sandbox must still answer, got %v", summarize(alive))
	}
}

// TestGatewayTenancyAndQuota: another tenant's sandbox is invisible (404), and 50 racing creates against a
// quota of 20 give exactly 20, enforced by the API server's quota admission with the real quota controller.
func TestGatewayTenancyAndQuota(t *testing.T) {
	g := gateway(t)
	_, keyA := gatewayTenant(t, 20)
	_, keyB := gatewayTenant(t, 20)
	status, created := g.call(t, keyA, "POST", "/v1/sandboxes", map[string]any{"wait": false})
	if status != http.StatusCreated {
		t.Fatalf("create: %d %v", status, created)
	}
	id := str(t, created, "id")
	for _, req := range []struct {
		method, path string
		body         any
	}{{"GET", "", nil}, {"POST", "/exec", map[string]any{"command": "true"}}, {"DELETE", "", nil}, {"POST", "/timeout", map[string]any{"timeout_minutes": 60}}} {
		status, body := g.call(t, keyB, req.method, "/v1/sandboxes/"+id+req.path, req.body)
		if status != http.StatusNotFound {
			t.Errorf("tenant B %s %s: status %d %v, want 404", req.method, req.path, status, body)
		}
	}
	if _, list := g.call(t, keyB, "GET", "/v1/sandboxes", nil); fmt.Sprint(list["sandboxes"]) != "[]" {
		t.Errorf("tenant B lists %v", list)
	}

	nsC, keyC := gatewayTenant(t, 20)
	// The quota controller fills the ResourceQuota's status shortly after creation; until then admission refuses.
	eventually(t, 30*time.Second, "quota status filled", func() error {
		q := &corev1.ResourceQuota{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: nsC, Name: admin.QuotaName}, q); err != nil {
			return err
		}
		if _, ok := q.Status.Hard[admin.QuotaResource]; !ok {
			return fmt.Errorf("status.hard not set yet")
		}
		return nil
	})
	var mu sync.Mutex
	counts := map[int]int{}
	var callErrs []error
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			status, _, err := g.try(keyC, "POST", "/v1/sandboxes", map[string]any{"wait": false})
			mu.Lock()
			counts[status]++
			if err != nil {
				callErrs = append(callErrs, err)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(callErrs) > 0 {
		t.Fatalf("%d of 50 racing creates failed to complete: %v", len(callErrs), callErrs[0])
	}
	if counts[http.StatusCreated] != 20 || counts[http.StatusTooManyRequests] != 30 {
		t.Fatalf("50 racing creates with a quota of 20: got %v, want 20 x 201 and 30 x 429", counts)
	}
}

func summarize(res map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range res {
		if s, ok := v.(string); ok && len(s) > 300 {
			v = s[:100] + "..." + s[len(s)-100:]
		}
		out[k] = v
	}
	return out
}
