package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	gwapi "airlock.dev/airlock/internal/gateway"
	"airlock.dev/airlock/pkg/client"
)

// TestSDK runs the SDKs against the real gateway and gVisor sandboxes: the Go SDK in process, then the Python
// SDK's integration tests and the two Python agent loops (pytest over Debian's python3-httpx). No sandbox may
// be left behind.
func TestSDK(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 20)
	ctx := context.Background()
	var tpl airlockv1.SandboxTemplate
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "python-node"}, &tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Annotations = map[string]string{gwapi.AnnotationInstalled: "Python 3.11 (python, pip), Node.js 18 (npm), git, curl, gcc and make"}
	if err := k8s.Update(ctx, &tpl); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{BaseURL: g.base, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Go", func(t *testing.T) { sdkGo(t, c) })
	t.Run("Python", func(t *testing.T) {
		py := "/usr/bin/python3" // Debian's, which sees python3-httpx and python3-pytest (hack/preflight.sh)
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "sdk/python/tests", "examples/python")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "AIRLOCK_API_URL="+g.base, "AIRLOCK_API_KEY="+key,
			"PYTHONPATH="+filepath.Join(root, "sdk/python")+":"+filepath.Join(root, "examples/python"), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("pytest:\n%s", out)
		if err != nil {
			t.Fatalf("pytest: %v", err)
		}
		if strings.Contains(string(out), "skipped") {
			t.Fatal("integration tests were skipped")
		}
	})

	eventually(t, 2*time.Minute, "no sandbox left", func() error {
		left, err := c.List(ctx)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d sandboxes left, first %s (%s)", len(left), left[0].ID, left[0].Status)
		}
		return nil
	})
}

func sdkGo(t *testing.T, c *client.Client) {
	ctx := context.Background()
	sbx, err := c.Create(ctx, client.CreateOptions{Network: "restricted", TimeoutMinutes: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sbx.Terminate(ctx); err != nil {
			t.Error(err)
		}
		if err := sbx.Terminate(ctx); err != nil {
			t.Errorf("second terminate: %v", err)
		}
	}()

	code := "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n"
	if err := sbx.Files.Write(ctx, "/workspace/tool_call.py", []byte(code)); err != nil {
		t.Fatal(err)
	}
	res, err := sbx.Exec(ctx, "python /workspace/tool_call.py", client.ExecOptions{})
	if err != nil || res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || res.Outcome != "exited" {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if got, err := sbx.Files.ReadText(ctx, "tool_call.py"); err != nil || got != code {
		t.Fatalf("/workspace is not the working directory: %q %v", got, err)
	}

	var chunks []string
	res, err = sbx.Exec(ctx, "for i in 1 2 3; do echo $i; sleep 0.2; done", client.ExecOptions{
		OnStdout: func(s string) error { chunks = append(chunks, s); return nil }})
	if err != nil || res.ExitCode != 0 || strings.Join(chunks, "") != "1\n2\n3\n" || len(chunks) < 2 {
		t.Fatalf("streaming: %v %+v %q", err, res, chunks)
	}

	res, err = sbx.Exec(ctx, "echo started; sleep 30", client.ExecOptions{Timeout: time.Second})
	if err != nil || res.ExitCode != client.ExitTimeout || res.Outcome != "timeout" || res.Stdout != "started\n" {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	if _, err := sbx.Exec(ctx, "sleep 30", client.ExecOptions{Timeout: time.Second, ErrorOnTimeout: true}); !errors.Is(err, client.ErrExecTimeout) {
		t.Fatalf("ErrorOnTimeout: %v", err)
	}
	t.Logf("observation of a timeout:\n%s", client.FormatObservation(res, client.ObservationOptions{}))

	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	if err := sbx.Files.Write(ctx, "a/b/data.bin", data); err != nil {
		t.Fatal(err)
	}
	if got, err := sbx.Files.Read(ctx, "/home/sandbox/a/b/data.bin"); err != nil || string(got) != string(data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if ls, err := sbx.Files.List(ctx, "a/b"); err != nil || len(ls) != 1 || ls[0].Name != "data.bin" || ls[0].Size != 1000 {
		t.Fatalf("list: %+v %v", ls, err)
	}
	if err := sbx.Files.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, err := sbx.Files.Exists(ctx, "a/b/data.bin"); err != nil || ok {
		t.Fatalf("exists after remove: %v %v", ok, err)
	}
	if _, err := sbx.Files.Read(ctx, "a/b/data.bin"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("read of a removed file: %v", err)
	}
	if _, err := sbx.Exec(ctx, "true", client.ExecOptions{Timeout: 100 * time.Hour}); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("a timeout over the cap: %v", err)
	}
	if _, err := c.Connect(ctx, "sbx-does-not-exist"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("connect to a missing sandbox: %v", err)
	}
	bad, err := client.New(client.Options{BaseURL: c.BaseURL(), APIKey: "alk_nope_nope"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.List(ctx); !errors.Is(err, client.ErrAuthentication) {
		t.Fatalf("bad key: %v", err)
	}

	tools, err := c.Tools(ctx, "", client.FormatAnthropic)
	if err != nil || len(tools) != 2 {
		t.Fatalf("tools: %v %v", err, tools)
	}
	desc, _ := tools[0]["description"].(string)
	for _, want := range []string{"Python 3.11", "/home/sandbox", "persist", "Stdin is closed", "60000 ms", "no network"} {
		if !strings.Contains(desc, want) {
			t.Errorf("run_command's description lacks %q: %s", want, desc)
		}
	}
	obs, err := sbx.RunTool(ctx, "run_python", []byte(`{"code": "print(sum(range(10)))"}`), client.ObservationOptions{})
	if err != nil || !strings.HasSuffix(obs, "stdout:\n45") {
		t.Fatalf("run_python: %v %q", err, obs)
	}
}
