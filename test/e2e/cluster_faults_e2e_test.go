package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clusterScript is the local cluster's own script: `kill DAEMON` SIGKILLs one daemon by its pidfile, `start
// DAEMON` starts it again with the arguments `up` gives it and waits until it serves.
var clusterScript = filepath.Join("..", "..", "hack", "local-cluster.sh")

// faultDaemon SIGKILLs the local cluster's daemon, waits down, and starts it again; it returns when the daemon
// serves again. Cleanup starts it in any case, so that a failing test does not leave the cluster broken.
func faultDaemon(t *testing.T, daemon string, down time.Duration) (killed, back time.Time) {
	t.Helper()
	run := func(verb string) error {
		out, err := exec.Command(clusterScript, verb, daemon).CombinedOutput()
		if err != nil {
			return fmt.Errorf("local-cluster.sh %s %s: %w\n%s", verb, daemon, err, out)
		}
		return nil
	}
	t.Cleanup(func() { _ = run("start") }) // a no-op once it runs
	killed = time.Now()
	if err := run("kill"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(down)
	if err := run("start"); err != nil {
		t.Fatal(err)
	}
	return killed, time.Now()
}

// execOutcome is one call to the gateway's exec: the HTTP status, the result or error code, how long it took.
type execOutcome struct {
	status         int
	code, outcome  string
	exitCode       float64
	stdout, detail string
	took           time.Duration
	err            error
	at             time.Time
}

// typed says whether the outcome is one the caller can act on: the true result, a sandbox_lost result, or a
// cluster_unavailable error. wantStdout is what the true result prints.
func (o execOutcome) typed(wantStdout string) bool {
	switch {
	case o.err != nil:
		return false
	case o.status == http.StatusOK && o.outcome == "exited":
		return o.exitCode == 0 && o.stdout == wantStdout // never a fake exit 0
	case o.status == http.StatusOK:
		return o.outcome == "sandbox_lost"
	}
	return o.status == http.StatusServiceUnavailable && o.code == "cluster_unavailable"
}

func (o execOutcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("error after %s: %v", o.took.Round(time.Millisecond), o.err)
	}
	return fmt.Sprintf("%d %s%s exit %v stdout %q %s after %s", o.status, o.code, o.outcome, o.exitCode, o.stdout, o.detail, o.took.Round(time.Millisecond))
}

// execBounded runs command through the gateway with a client that gives up after limit: a call that takes
// longer hangs, as far as an agent is concerned.
func execBounded(g *gatewayProc, key, id, command string, timeoutMS int, limit time.Duration) execOutcome {
	body, _ := json.Marshal(map[string]any{"command": command, "timeout_ms": timeoutMS})
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := (&http.Client{Timeout: limit}).Do(req)
	o := execOutcome{took: time.Since(start), at: start, err: err}
	if err != nil {
		return o
	}
	defer resp.Body.Close()
	var out struct {
		ExitCode float64 `json:"exit_code"`
		Outcome  string  `json:"outcome"`
		Stdout   string  `json:"stdout"`
		Detail   string  `json:"detail"`
		Error    *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		o.err = fmt.Errorf("status %d, body not JSON: %w", resp.StatusCode, err)
		return o
	}
	o.took, o.status, o.exitCode, o.outcome, o.stdout, o.detail = time.Since(start), resp.StatusCode, out.ExitCode, out.Outcome, out.Stdout, out.Detail
	if out.Error != nil {
		o.code, o.detail = out.Error.Code, out.Error.Message
	}
	return o
}

// alive says whether the process still runs (not exited, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestControlPlaneRestartUnderLoad SIGKILLs kube-apiserver, and then etcd, while commands run in a sandbox
// and an agent keeps calling, and starts it again 3 s later. The manager runs with leader election, as it is
// deployed. Neither the manager nor the gateway may need a restart of its own; every call in flight or made
// during the outage must end within 45 s with the true result or a typed error (sandbox_lost or
// cluster_unavailable), never a hang and never an exit 0 the command did not give; afterwards the sandbox keeps
// its files, runs commands, and a new sandbox becomes Ready.
func TestControlPlaneRestartUnderLoad(t *testing.T) {
	restartManager(t, "--leader-elect=true")
	g, err := startGateway()
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	_, key := gatewayTenant(t, 10)
	status, created := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 20})
	if status != http.StatusCreated || created["status"] != "ready" {
		t.Fatalf("create: status %d %v", status, created)
	}
	id := str(t, created, "id")
	if res := g.execCmd(t, key, id, "echo kept > state", 30_000); res["exit_code"] != float64(0) {
		t.Fatalf("writing state: %v", summarize(res))
	}
	mgrPID, gwPID := mgr.cmd.Process.Pid, g.cmd.Process.Pid

	for _, daemon := range []string{"kube-apiserver", "etcd"} {
		t.Run(daemon, func(t *testing.T) {
			const inflight, limit = 4, 45 * time.Second
			type numbered struct {
				n int
				execOutcome
			}
			results := make(chan numbered, inflight)
			for i := range inflight {
				go func() {
					results <- numbered{i, execBounded(g, key, id, fmt.Sprintf("echo started; sleep 6; echo done-%d", i), 30_000, limit)}
				}()
			}
			eventually(t, 30*time.Second, "the commands running", func() error {
				res := g.execCmd(t, key, id, "ps -eo comm= | grep -c '^sleep$' || true", 10_000)
				if n := strings.TrimSpace(fmt.Sprint(res["stdout"])); n != fmt.Sprint(inflight) {
					return fmt.Errorf("%s sleeps running", n)
				}
				return nil
			})
			// An agent's calls meanwhile, one after the other.
			stopProbe := make(chan struct{})
			var probes []execOutcome
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stopProbe:
						return
					default:
					}
					probes = append(probes, execBounded(g, key, id, "echo ok", 10_000, limit))
					time.Sleep(250 * time.Millisecond)
				}
			})
			killed, back := faultDaemon(t, daemon, 3*time.Second)
			for range inflight {
				select {
				case o := <-results:
					if !o.typed(fmt.Sprintf("started\ndone-%d\n", o.n)) {
						t.Errorf("command %d in flight: %s", o.n, o)
					} else {
						t.Logf("in flight: %s (killed %s after it started)", o, killed.Sub(o.at).Round(time.Millisecond))
					}
				case <-time.After(limit + 10*time.Second):
					t.Fatal("a call in flight hangs")
				}
			}
			// Calls work again soon after the daemon is back; the sandbox kept its files.
			var firstOK time.Duration
			eventually(t, 60*time.Second, "commands run again", func() error {
				o := execBounded(g, key, id, "cat state", 10_000, limit)
				if o.status != http.StatusOK || o.stdout != "kept\n" {
					return fmt.Errorf("%s", o)
				}
				firstOK = time.Since(back)
				return nil
			})
			close(stopProbe)
			wg.Wait()
			counts := map[string]int{}
			for _, o := range probes {
				if !o.typed("ok\n") {
					t.Errorf("a call during the outage: %s", o)
				}
				counts[fmt.Sprintf("%d %s%s", o.status, o.code, o.outcome)]++
			}
			if !alive(mgrPID) || mgr.cmd.Process.Pid != mgrPID {
				t.Fatalf("the manager did not survive the %s restart (see its log)", daemon)
			}
			if !alive(gwPID) {
				t.Fatalf("the gateway did not survive the %s restart", daemon)
			}
			// The manager's watches and lease came back: a new sandbox becomes Ready.
			start := time.Now()
			status, fresh := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 5})
			if status != http.StatusCreated || fresh["status"] != "ready" {
				t.Fatalf("create after the restart: status %d %v", status, fresh)
			}
			g.call(t, key, "DELETE", "/v1/sandboxes/"+str(t, fresh, "id"), nil)
			t.Logf("%s down %s (killed, 3 s, started until it served); calls in the outage: %v; a command ran again %s after it was back; a new sandbox Ready in %s",
				daemon, back.Sub(killed).Round(time.Millisecond), counts, firstOK.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		})
	}
}
