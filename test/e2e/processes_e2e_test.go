package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitProcessOutput polls a background process's output from offset until stdout holds want; it returns the
// response with the offset reached.
func waitProcessOutput(t *testing.T, g *gatewayProc, key, id, pid string, offset int64, want string) map[string]any {
	t.Helper()
	var last map[string]any
	eventually(t, 30*time.Second, fmt.Sprintf("stdout of %s holds %q", pid, want), func() error {
		status, res := g.call(t, key, "GET", fmt.Sprintf("/v1/sandboxes/%s/processes/%s?stdout_offset=%d", id, pid, offset), nil)
		if status != http.StatusOK {
			return fmt.Errorf("status %d: %v", status, res)
		}
		last = res
		if !strings.Contains(fmt.Sprint(res["stdout"]), want) {
			return fmt.Errorf("stdout %q", res["stdout"])
		}
		return nil
	})
	return last
}

// TestGatewayBackgroundProcesses: a dev server started in the background answers foreground commands; a
// process takes stdin and is read from byte offsets, also through a gateway started after it (state lives in
// the sandbox's PID 1, not in a gateway); signal and DELETE end it, outcome killed, and nothing is left.
func TestGatewayBackgroundProcesses(t *testing.T) {
	g := gateway(t)
	_, key := gatewayTenant(t, 5)
	status, created := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 30})
	if status != http.StatusCreated || created["status"] != "ready" {
		t.Fatalf("create: status %d %v", status, created)
	}
	id := str(t, created, "id")
	base := "/v1/sandboxes/" + id

	start := time.Now()
	status, srv := g.call(t, key, "POST", base+"/exec", map[string]any{"command": "exec python3 -m http.server 8123 --bind 127.0.0.1", "background": true})
	if status != http.StatusAccepted || srv["status"] != "running" {
		t.Fatalf("background start: status %d %v", status, srv)
	}
	t.Logf("background start answered in %v: %v", time.Since(start), srv)
	srvID := str(t, srv, "process_id")
	eventually(t, 30*time.Second, "the dev server answers", func() error {
		res := g.execCmd(t, key, id, "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:8123/\").status)'", 10000)
		if res["exit_code"] != float64(0) || strings.TrimSpace(fmt.Sprint(res["stdout"])) != "200" {
			return fmt.Errorf("%v", summarize(res))
		}
		return nil
	})

	status, echo := g.call(t, key, "POST", base+"/exec", map[string]any{"command": "echo ready; while read -r l; do echo \"got $l\"; done; echo eof", "background": true})
	if status != http.StatusAccepted {
		t.Fatalf("background start: status %d %v", status, echo)
	}
	echoID := str(t, echo, "process_id")
	first := waitProcessOutput(t, g, key, id, echoID, 0, "ready\n")
	off := int64(first["stdout_offset"].(float64))
	if status, res := g.call(t, key, "POST", base+"/processes/"+echoID+"/stdin", map[string]any{"data": "héllo\n"}); status != http.StatusOK {
		t.Fatalf("stdin: %d %v", status, res)
	}

	// A gateway that did not start the process answers for it: re-attach from the offset reached.
	g2, err := startGateway()
	if err != nil {
		t.Fatal(err)
	}
	defer g2.stop()
	res := waitProcessOutput(t, g2, key, id, echoID, off, "got héllo\n")
	if res["stdout"] != "got héllo\n" {
		t.Fatalf("output from offset %d must start where the last read ended: %q", off, res["stdout"])
	}
	status, list := g2.call(t, key, "GET", base+"/processes", nil)
	procs, _ := list["processes"].([]any)
	if status != http.StatusOK || len(procs) != 2 {
		t.Fatalf("list: status %d %v", status, list)
	}
	if status, res := g2.call(t, key, "POST", base+"/processes/"+echoID+"/stdin", map[string]any{"eof": true}); status != http.StatusOK {
		t.Fatalf("close stdin: %d %v", status, res)
	}
	status, done := g2.call(t, key, "GET", base+"/processes/"+echoID+"?wait_ms=10000", nil)
	if status != http.StatusOK || done["status"] != "exited" || done["exit_code"] != float64(0) || !strings.HasSuffix(fmt.Sprint(done["stdout"]), "eof\n") {
		t.Fatalf("after EOF: status %d %v", status, done)
	}

	// Bad input gets a clear error and changes nothing.
	if status, res := g.call(t, key, "POST", base+"/processes/"+srvID+"/signal", map[string]any{"signal": "SIGNOPE"}); status != http.StatusBadRequest {
		t.Fatalf("unknown signal: %d %v", status, res)
	}
	if status, res := g.call(t, key, "GET", base+"/processes/no-such-process-0123456789", nil); status != http.StatusNotFound {
		t.Fatalf("unknown process: %d %v", status, res)
	}
	if status, res := g.call(t, key, "GET", base+"/processes/"+srvID+"?stdout_offset=-1", nil); status != http.StatusBadRequest {
		t.Fatalf("negative offset: %d %v", status, res)
	}

	status, killed := g.call(t, key, "DELETE", base+"/processes/"+srvID, nil)
	if status != http.StatusOK || killed["status"] != "exited" || killed["outcome"] != "killed" {
		t.Fatalf("delete: status %d %v", status, killed)
	}
	if r := g.execCmd(t, key, id, "ps -eo args --no-headers | grep -c '[h]ttp.server' || true", 10000); strings.TrimSpace(fmt.Sprint(r["stdout"])) != "0" {
		t.Fatalf("the killed server is still running: %v", summarize(r))
	}
	if status, _ := g.call(t, key, "DELETE", base, nil); status != http.StatusOK {
		t.Fatalf("delete sandbox: %d", status)
	}
}
