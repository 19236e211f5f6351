package runwrap

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// TestNoCommandBeforeTheGate: PID 1 whose network gate waits (its target still accepts connections, as before
// the policy is in effect) serves nothing: the readiness probe fails and an exec runs no command. Once the target
// is blocked, the probe passes and commands run. With PID 1 listening before its gate (the socket bound first),
// the exec below creates the file and the test fails.
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
	pid1 := child.DieWithParent(exec.Command(wrapperBin, "pid1", "--gate-host", host, "--gate-port", port, "--gate-timeout", "60s",
		"--termination-log", filepath.Join(t.TempDir(), "termination-log")))
	pid1.Env = env
	pid1.Stderr = os.Stderr
	if err := pid1.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pid1.Process.Kill(); _ = pid1.Wait() })

	ready := func(wait string) (int, string) {
		cmd := child.DieWithParent(exec.Command(wrapperBin, "ready", "--wait", wait))
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := ready("500ms"); code != 1 || !strings.Contains(out, "network gate has not passed") {
		t.Fatalf("ready before the gate: exit %d %q, want 1 and why", code, out)
	}
	made := filepath.Join(t.TempDir(), "ran")
	cmd := wrapperCmd(t, "--", "/bin/sh", "-c", "touch "+made)
	cmd.Env = env
	start := time.Now()
	res := runCmd(t, cmd, nil)
	if _, err := os.Stat(made); err == nil || res.code == 0 {
		t.Fatalf("a command ran before the gate passed: exit %d, stderr %q", res.code, res.stderr)
	}
	t.Logf("exec before the gate: exit %d after %s: %s", res.code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(res.stderr))

	target.Close() // the "policy" is in effect: connects are refused
	if code, out := ready("10s"); code != 0 {
		t.Fatalf("ready after the gate: exit %d %q", code, out)
	}
	cmd = wrapperCmd(t, "--", "/bin/sh", "-c", "touch "+made)
	cmd.Env = env
	if res := runCmd(t, cmd, nil); res.code != 0 {
		t.Fatalf("after the gate: exit %d, stderr %q", res.code, res.stderr)
	}
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("the command did not run after the gate: %v", err)
	}
}
