package runwrap

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// TestNoCommandBeforeTheGate: PID 1 whose network gate waits (its target still accepts connections, as before
// the policy is in effect) serves nothing and attests nothing: its readiness port holds its answer and a client
// finds no socket. Once the target is blocked, the held probe gets 200 at once, PID 1 attests its key, and a
// session with it runs commands. With PID 1 listening before its gate (the socket bound first), the client
// before the gate gets a session and the test fails.
func TestNoCommandBeforeTheGate(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	host, port, _ := net.SplitHostPort(target.Addr().String())
	sock := "@airlock-gate-test-" + filepath.Base(t.TempDir())
	env := append(os.Environ(), SocketEnv+"="+sock)
	readyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	readyAddr := readyLn.Addr().String()
	_, readyPort, _ := net.SplitHostPort(readyAddr)
	readyLn.Close() // a free port for PID 1's readiness port
	pid1, keys, err := launchPID1(wrapperBin, env, "pid1", "--gate-host", host, "--gate-port", port, "--gate-timeout", "60s",
		"--ready-port", readyPort, "--termination-log", filepath.Join(t.TempDir(), "termination-log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pid1.Process.Kill(); _ = pid1.Wait() })

	// The kubelet's probe, every period from before the gate passed: each is held for a while, then answered
	// 503 while the gate is pending; the first 200 is reported.
	type answer struct {
		status int
		at     time.Time
		err    error
	}
	probed := make(chan answer, 1)
	go func() {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + readyAddr + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					probed <- answer{status: resp.StatusCode, at: time.Now()}
					return
				}
			}
			if time.Now().After(deadline) {
				probed <- answer{err: fmt.Errorf("no answer but 503 or errors (last: %v)", err)}
				return
			}
		}
	}()
	// Before the gate there is no key to pin and nothing to connect to: the client gives up.
	client := child.DieWithParent(exec.Command(wrapperBin, "connect"))
	client.Env = env
	var clientErr strings.Builder
	client.Stdin, client.Stderr = strings.NewReader(""), &clientErr
	start := time.Now()
	if err := client.Run(); err == nil || !strings.Contains(clientErr.String(), "connect to the supervisor") {
		t.Fatalf("a session was served before the gate passed: %v, stderr %q", err, clientErr.String())
	}
	t.Logf("connect before the gate: failed after %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(clientErr.String()))
	select {
	case <-keys:
		t.Fatal("PID 1 attested before the gate passed")
	default:
	}

	select {
	case a := <-probed:
		t.Fatalf("the readiness probe was answered before the gate passed: %+v", a)
	default:
	}
	target.Close() // the "policy" is in effect: connects are refused
	passed := time.Now()
	a := <-probed
	if a.err != nil || a.status != http.StatusOK || a.at.Sub(passed) > 2*time.Second {
		t.Fatalf("the held readiness probe after the gate: %+v, %s after the block", a, a.at.Sub(passed))
	}
	key, ok := <-keys
	if !ok {
		t.Fatal("PID 1 did not attest after the gate passed")
	}
	made := filepath.Join(t.TempDir(), "ran")
	res, rep := runOn(t, openSessionEnv(t, []string{SocketEnv + "=" + sock}, key), parseRun(t, "--", "/bin/sh", "-c", "touch "+made), nil)
	if rep.Error != "" || res.trailer == nil || res.trailer.ExitCode != 0 {
		t.Fatalf("after the gate: %+v, stderr %q", rep, res.stderr)
	}
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("the command did not run after the gate: %v", err)
	}
}
