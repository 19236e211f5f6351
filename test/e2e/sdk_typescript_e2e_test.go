package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	gwapi "airlock.dev/airlock/internal/gateway"
)

// TestSDKTypeScript runs the TypeScript SDK's integration tests (sdk/typescript/itest: issue 10's run_python
// executor in plain JavaScript, create, streaming, timeout, files, errors, quota, await using, the tool
// definitions) and the three TypeScript agent loops (examples/typescript: the
// official Anthropic, OpenAI and Vercel AI SDK clients against a scripted model server) against the real
// gateway and gVisor sandboxes. npm dependencies come from the lockfiles via hack/npm-deps.sh. No sandbox may
// be left behind in either tenant.
func TestSDKTypeScript(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 20)
	quotaNS, quotaKey := gatewayTenant(t, 2)
	const installed = "Python 3.11 (python, pip), Node.js 18 (npm), git, curl, gcc and make"
	ctx := context.Background()
	var tpl airlockv1.SandboxTemplate
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "python-node"}, &tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Annotations = map[string]string{gwapi.AnnotationInstalled: installed}
	if err := k8s.Update(ctx, &tpl); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "AIRLOCK_API_URL="+g.base, "AIRLOCK_API_KEY="+key, "AIRLOCK_QUOTA_API_KEY="+quotaKey,
		"AIRLOCK_TEST_INSTALLED="+installed)
	run := func(t *testing.T, dir string, name string, args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, args...)
		cmd.Dir, cmd.Env = filepath.Join(root, dir), env
		out, err := cmd.CombinedOutput()
		t.Logf("%s %v in %s:\n%s", name, args, dir, out)
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return string(out)
	}
	// node --test's summary: an integration test that was skipped proves nothing.
	summary := regexp.MustCompile(`(?m)^# (pass|fail|skipped|todo) (\d+)$`)
	checkSummary := func(t *testing.T, out string) {
		t.Helper()
		counts := map[string]string{}
		for _, m := range summary.FindAllStringSubmatch(out, -1) {
			counts[m[1]] = m[2]
		}
		if counts["pass"] == "" || counts["pass"] == "0" || counts["fail"] != "0" || counts["skipped"] != "0" || counts["todo"] != "0" {
			t.Fatalf("node --test summary %v: want passes and no failed, skipped or todo tests", counts)
		}
	}

	run(t, ".", "hack/npm-deps.sh", "sdk/typescript", "examples/typescript")
	t.Run("SDK", func(t *testing.T) { checkSummary(t, run(t, "sdk/typescript", "npm", "run", "test:integration")) })
	t.Run("Loops", func(t *testing.T) { checkSummary(t, run(t, "examples/typescript", "npm", "test")) })

	for _, n := range []string{ns, quotaNS} {
		eventually(t, 2*time.Minute, "no sandbox left in "+n, func() error {
			var left airlockv1.SandboxList
			if err := k8s.List(ctx, &left, client.InNamespace(n)); err != nil {
				return err
			}
			if len(left.Items) > 0 {
				return fmt.Errorf("%d sandboxes left, first %s", len(left.Items), left.Items[0].Name)
			}
			return nil
		})
	}
}
