package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// airlockCLI builds cmd/airlock once for the run.
func airlockCLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-e2e-cli-*")
		if err != nil {
			cliErr = err
			return
		}
		addRunFile(dir, false)
		cliPath = filepath.Join(dir, "airlock")
		out, err := exec.Command("go", "build", "-o", cliPath, "../../cmd/airlock").CombinedOutput()
		if err != nil {
			cliErr = errors.New("go build ./cmd/airlock: " + err.Error() + "\n" + string(out))
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

type cliRun struct {
	code        int
	out, errOut string
}

// TestCLI drives the built airlock binary against the real gateway as a person would: login, create, exec
// with a non-zero exit and a timeout, cp both ways, run (also interrupted), rm; with exit codes and output.
func TestCLI(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 5)
	bin := airlockCLI(t)
	home := t.TempDir()
	env := append(os.Environ(), "XDG_CONFIG_HOME="+home, "AIRLOCK_API_URL=", "AIRLOCK_API_KEY=")
	airlock := func(t *testing.T, stdin string, args ...string) cliRun {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("airlock %v: %v", args, err)
		}
		r := cliRun{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
		t.Logf("airlock %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.out, r.errOut)
		return r
	}

	if r := airlock(t, "", "ls"); r.code != 1 || !strings.Contains(r.errOut, "airlock login") {
		t.Fatalf("ls before login: want exit 1 and how to log in")
	}
	if r := airlock(t, key+"\n", "login", "--api-url", g.base); r.code != 0 {
		t.Fatal("login failed")
	}
	if st, err := os.Stat(filepath.Join(home, "airlock", "config.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("login file: %v %v", st, err)
	}

	r := airlock(t, "", "create", "--template", "python-node")
	id := strings.TrimSpace(r.out)
	if r.code != 0 || id == "" {
		t.Fatal("create failed")
	}
	if r := airlock(t, "", "ls"); r.code != 0 || !strings.Contains(r.out, id) || !strings.Contains(r.out, "ready") {
		t.Errorf("ls does not show %s ready", id)
	}
	if r := airlock(t, "", "get", id, "-o", "json"); r.code != 0 || !strings.Contains(r.out, `"id": "`+id+`"`) {
		t.Errorf("get -o json")
	}
	if r := airlock(t, "", "exec", id, "--", "python3", "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"); r.code != 3 ||
		r.out != "out\n" || r.errOut != "err\n" {
		t.Errorf("exec: want exit 3, out on stdout and err on stderr")
	}
	if r := airlock(t, "", "exec", id, "--sh", "echo a b | wc -w"); r.code != 0 || strings.TrimSpace(r.out) != "2" {
		t.Errorf("exec --sh")
	}
	if r := airlock(t, "", "exec", id, "--timeout", "2s", "--", "sleep", "30"); r.code != 124 || !strings.Contains(r.errOut, "ran out of time") {
		t.Errorf("exec timeout: want exit 124 and the reason on stderr")
	}
	if r := airlock(t, "", "exec", id, "--max-output-bytes", "1024", "--", "python3", "-c", "print('x'*5000)"); r.code != 0 ||
		!strings.Contains(r.errOut, "stdout was cut in the result") || !strings.Contains(r.errOut, "airlock cp "+id+":") {
		t.Errorf("exec with truncated output: want the cut said on stderr")
	}

	dir := t.TempDir()
	local := filepath.Join(dir, "data.txt")
	if err := os.WriteFile(local, []byte("round trip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := airlock(t, "", "cp", local, id+":./"); r.code != 0 {
		t.Errorf("cp up")
	}
	if r := airlock(t, "", "exec", id, "--", "cat", "data.txt"); r.out != "round trip\n" {
		t.Errorf("the uploaded file holds %q", r.out)
	}
	if r := airlock(t, "", "cp", id+":data.txt", filepath.Join(dir, "back.txt")); r.code != 0 {
		t.Errorf("cp down")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "back.txt")); err != nil || string(b) != "round trip\n" {
		t.Errorf("downloaded %q, %v", b, err)
	}
	if r := airlock(t, "", "cp", id+":none.txt", dir); r.code != 1 || !strings.Contains(r.errOut, "no such file") {
		t.Errorf("cp of a missing file: want exit 1 and no such file")
	}

	if r := airlock(t, "", "rm", id); r.code != 0 || !strings.Contains(r.out, id+" deleted") {
		t.Errorf("rm")
	}
	if r := airlock(t, "", "exec", id, "--", "true"); r.code != 125 || !strings.Contains(r.errOut, "terminating") && !strings.Contains(r.errOut, "not found") {
		t.Errorf("exec in a removed sandbox: want 125 and why")
	}

	if r := airlock(t, "", "run", "--", "python3", "-c", "print(6*7)"); r.code != 0 || r.out != "42\n" {
		t.Errorf("run: want 42")
	}
	if r := airlock(t, "", "run", "--sh", "exit 7"); r.code != 7 {
		t.Errorf("run of a failing command: want exit 7")
	}

	// Ctrl-C during run: the sandbox is deleted all the same.
	cmd := exec.Command(bin, "run", "--", "sleep", "300")
	cmd.Env = env
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "run's sandbox exists", func() error {
		var list airlockv1.SandboxList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, sb := range list.Items {
			if sb.DeletionTimestamp == nil && sb.Status.Phase == airlockv1.PhaseReady {
				return nil
			}
		}
		return errors.New("no ready sandbox yet")
	})
	time.Sleep(2 * time.Second) // the command has started
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	t.Logf("interrupted run: %v\n%s", err, errOut.String())
	if cmd.ProcessState.ExitCode() != 125 || !strings.Contains(errOut.String(), "deleting sandbox") {
		t.Errorf("interrupted run: exit %d, want 125 and the deletion said", cmd.ProcessState.ExitCode())
	}
	noSandboxLeft(t, ns)
}

// noSandboxLeft waits until ns has no Sandbox.
func noSandboxLeft(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 2*time.Minute, "no sandbox left in "+ns, func() error {
		var left airlockv1.SandboxList
		if err := k8s.List(context.Background(), &left, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(left.Items) > 0 {
			return errors.New(left.Items[0].Name + " is left")
		}
		return nil
	})
}
