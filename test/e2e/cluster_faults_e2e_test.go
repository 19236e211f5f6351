package e2e

import (
	"bytes"
	"context"
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

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterScript is the local cluster's own script: `kill DAEMON` SIGKILLs one daemon by its pidfile, `start
// DAEMON` starts it again with the arguments `up` gives it and waits until it serves.
var clusterScript = filepath.Join("..", "..", "hack", "local-cluster.sh")

// faultDaemon SIGKILLs the local cluster's daemon, runs during (if any) and waits until down has passed, and
// starts it again; it returns when the daemon serves again. Cleanup starts it in any case, so that a failing
// test does not leave the cluster broken.
func faultDaemon(t *testing.T, daemon string, down time.Duration, during func()) (killed, back time.Time) {
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
	if during != nil {
		during()
	}
	time.Sleep(time.Until(killed.Add(down)))
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
// deployed. Neither the manager nor the gateway may need a restart of its own; every call in flight gets its
// command's true result (the gateway follows a run again after its stream broke), and every call made during
// the outage ends within 45 s with the true result or a typed error (sandbox_lost or cluster_unavailable),
// never a hang and never an exit 0 the command did not give; afterwards the sandbox keeps its files, runs
// commands, and a new sandbox becomes Ready.
func TestControlPlaneRestartUnderLoad(t *testing.T) {
	restartManager(t, "--leader-elect=true", "--leader-election-namespace="+keyNamespace)
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
			killed, back := faultDaemon(t, daemon, 3*time.Second, nil)
			for range inflight {
				select {
				case o := <-results:
					// A broken stream loses nothing: the gateway follows the command again once it can.
					if want := fmt.Sprintf("started\ndone-%d\n", o.n); o.status != http.StatusOK || o.outcome != "exited" || o.exitCode != 0 || o.stdout != want {
						t.Errorf("command %d in flight: %s, want its true result %q", o.n, o, want)
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
			// The manager's watches and lease came back: a new sandbox becomes Ready. A restarted API server
			// serves custom resources a moment after its core ones (it answers 503 "Resource kind ... not found"
			// until its CRD handler has synced); the gateway says so with a retryable 503 cluster_unavailable,
			// which a client retries. Anything else fails at once.
			start := time.Now()
			var status int
			var fresh map[string]any
			retried := 0
			eventually(t, 30*time.Second, "a create after the restart answered other than 503 cluster_unavailable", func() error {
				status, fresh = g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 5})
				if status == http.StatusServiceUnavailable && errorCode(fresh) == "cluster_unavailable" {
					retried++
					return fmt.Errorf("status %d %v", status, fresh)
				}
				return nil
			})
			if status != http.StatusCreated || fresh["status"] != "ready" {
				t.Fatalf("create after the restart (after %d retried 503s): status %d %v", retried, status, fresh)
			}
			g.call(t, key, "DELETE", "/v1/sandboxes/"+str(t, fresh, "id"), nil)
			t.Logf("%s down %s (killed, 3 s, started until it served); calls in the outage: %v; a command ran again %s after it was back; a new sandbox Ready in %s (%d retried 503s before)",
				daemon, back.Sub(killed).Round(time.Millisecond), counts, firstOK.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), retried)
		})
	}
}

// TestNodeDaemonsKilled SIGKILLs the kubelet, and then containerd, for 5 s each. Pods outlive both (their
// containers belong to the runtime's shims, not to the daemons): a sandbox keeps its files and its background
// process, and runs commands again once the daemon is back; a command in flight across the outage gets its true
// result (the gateway follows it again); a call while it is down ends with a typed error (or the true result),
// never a hang. A sandbox whose container is stopped while the kubelet is away does not
// survive: once the kubelet is back it is Failed with the pod's reason, and the gateway says so.
func TestNodeDaemonsKilled(t *testing.T) {
	g, err := startGateway()
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	ns, key := gatewayTenant(t, 10)
	ids := make([]string, 2)
	for i := range ids {
		status, created := g.call(t, key, "POST", "/v1/sandboxes", map[string]any{"size": "small", "timeout_minutes": 20})
		if status != http.StatusCreated || created["status"] != "ready" {
			t.Fatalf("create: status %d %v", status, created)
		}
		ids[i] = str(t, created, "id")
		if res := g.execCmd(t, key, ids[i], "echo kept > state", 30_000); res["exit_code"] != float64(0) {
			t.Fatalf("writing state: %v", summarize(res))
		}
	}
	kept, doomed := ids[0], ids[1]
	status, bg := g.call(t, key, "POST", "/v1/sandboxes/"+kept+"/exec",
		map[string]any{"command": "while true; do echo tick >> ticks; sleep 1; done", "background": true})
	if status != http.StatusAccepted {
		t.Fatalf("background start: %d %v", status, bg)
	}
	bgID := str(t, bg, "process_id")
	ticks := func() int {
		res := g.execCmd(t, key, kept, "wc -l < ticks", 10_000)
		var n int
		_, _ = fmt.Sscan(fmt.Sprint(res["stdout"]), &n)
		return n
	}

	for _, daemon := range []string{"kubelet", "containerd"} {
		t.Run(daemon, func(t *testing.T) {
			before := ticks()
			var during execOutcome
			stopDoomed := func() {
				// A call while the daemon is away, and (kubelet round) the doomed sandbox's container stopped
				// behind its back, through containerd.
				during = execBounded(g, key, kept, "echo ok", 10_000, 45*time.Second)
				if daemon != "kubelet" {
					return
				}
				pod := podOf(t, ns, doomed)
				id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
				if out, err := exec.Command("crictl", "stop", "--timeout", "0", id).CombinedOutput(); err != nil {
					t.Errorf("crictl stop %s: %v %s", id, err, out)
				}
			}
			// A command in flight across the outage: its stream breaks with the daemon, the gateway follows it
			// again once the daemon is back, and its caller gets the true result.
			inflight := make(chan execOutcome, 1)
			go func() {
				inflight <- execBounded(g, key, kept, "echo started; sleep 8; echo done", 60_000, 60*time.Second)
			}()
			eventually(t, 30*time.Second, "the command in flight running", func() error {
				res := g.execCmd(t, key, kept, "ps -eo args= | grep -c '^[s]leep 8' || true", 10_000)
				if n := strings.TrimSpace(fmt.Sprint(res["stdout"])); n != "1" {
					return fmt.Errorf("%s sleeps running", n)
				}
				return nil
			})
			killed, back := faultDaemon(t, daemon, 5*time.Second, stopDoomed)
			if !during.typed("ok\n") {
				t.Errorf("a call while %s was down: %s", daemon, during)
			}
			select {
			case o := <-inflight:
				if o.status != http.StatusOK || o.outcome != "exited" || o.exitCode != 0 || o.stdout != "started\ndone\n" {
					t.Errorf("the command in flight across %s's restart: %s, want its true result", daemon, o)
				} else {
					t.Logf("in flight across %s's restart: %s", daemon, o)
				}
			case <-time.After(70 * time.Second):
				t.Fatalf("the command in flight across %s's restart hangs", daemon)
			}
			var firstOK time.Duration
			eventually(t, 90*time.Second, "commands run again, files kept", func() error {
				o := execBounded(g, key, kept, "cat state", 10_000, 45*time.Second)
				if o.status != http.StatusOK || o.stdout != "kept\n" {
					return fmt.Errorf("%s", o)
				}
				firstOK = time.Since(back)
				return nil
			})
			status, proc := g.call(t, key, "GET", "/v1/sandboxes/"+kept+"/processes/"+bgID, nil)
			if status != http.StatusOK || proc["status"] != "running" {
				t.Errorf("the background process after %s's restart: %d %v", daemon, status, proc)
			}
			after := ticks()
			if want := before + int(back.Sub(killed).Seconds()); after < want-2 {
				t.Errorf("the background process ticked %d times across %s's %s outage, want about %d", after-before, daemon, back.Sub(killed).Round(time.Second), want-before)
			}
			t.Logf("%s down %s; a call meanwhile: %s; commands ran again %s after it was back; background ticks %d -> %d",
				daemon, back.Sub(killed).Round(time.Millisecond), during, firstOK.Round(time.Millisecond), before, after)
			if daemon != "kubelet" {
				return
			}
			eventually(t, 60*time.Second, "the stopped sandbox Failed, as the gateway says", func() error {
				status, view := g.call(t, key, "GET", "/v1/sandboxes/"+doomed, nil)
				if status != http.StatusOK || view["status"] != "failed" || !strings.Contains(fmt.Sprint(view["message"]), "container sandbox") {
					return fmt.Errorf("%d %v", status, view)
				}
				return nil
			})
			o := execBounded(g, key, doomed, "cat state", 10_000, 45*time.Second)
			if o.status != http.StatusConflict || o.code != "sandbox_not_ready" {
				t.Errorf("a command in the failed sandbox: %s, want 409 sandbox_not_ready", o)
			}
			_, view := g.call(t, key, "GET", "/v1/sandboxes/"+doomed, nil)
			t.Logf("the stopped sandbox: %v: %v", view["reason"], view["message"])
		})
	}
}

// podOf returns the pod of the sandbox with this gateway id in ns.
func podOf(t *testing.T, ns, id string) *corev1.Pod {
	t.Helper()
	s, err := getSandbox(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// errorCode is the code of a gateway error answer ({"error": {"code": ...}}), "" for any other answer.
func errorCode(answer map[string]any) string {
	e, _ := answer["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}
