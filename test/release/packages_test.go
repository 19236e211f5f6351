package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func distFiles(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "dist", pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dist/%s (%v): run `make test-release`, which runs `make release` first", pattern, err)
	}
	return files
}

func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestChecksumsHold: dist/SHA256SUMS covers the chart, the SDK packages and the CLI binaries, and holds.
func TestChecksumsHold(t *testing.T) {
	dist := filepath.Join(repoRoot(t), "dist")
	out := runIn(t, dist, nil, "sha256sum", "-c", "SHA256SUMS")
	for _, want := range []string{"airlock-", "python/", "npm/", "cli/airlock-linux-amd64", "cli/airlock-linux-arm64", "cli/airlock-darwin-amd64", "cli/airlock-darwin-arm64"} {
		if !strings.Contains(out, want) {
			t.Errorf("SHA256SUMS does not cover %s:\n%s", want, out)
		}
	}
}

// TestPythonPackagesInstallIntoACleanVenv: the wheel and the sdist install, without an index, into fresh
// virtual environments that see only Debian's packages (httpx; there is no PyPI here), and the installed SDK
// works and states its licence.
func TestPythonPackagesInstallIntoACleanVenv(t *testing.T) {
	for _, pkg := range append(distFiles(t, "python/*.whl"), distFiles(t, "python/*.tar.gz")...) {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			venv := filepath.Join(t.TempDir(), "venv")
			runIn(t, "", nil, "/usr/bin/python3", "-m", "venv", "--system-site-packages", venv)
			py := filepath.Join(venv, "bin", "python")
			runIn(t, "", nil, py, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", pkg)
			out := runIn(t, t.TempDir(), nil, py, "-c", `import importlib.metadata as m, airlock
t = airlock.tool_definitions("anthropic", installed="Node.js 22")
print(airlock.__version__, m.metadata("airlock-sdk")["License"], [x["name"] for x in t])`)
			if !strings.Contains(out, "Apache-2.0") || !strings.Contains(out, "['run_command', 'run_python']") {
				t.Errorf("the installed SDK says %q", out)
			}
		})
	}
}

// TestNpmPackageInstallsIntoACleanProject: the npm tarball installs offline into an empty project (it has no
// runtime dependencies) with its LICENSE, and its ES module loads and works.
func TestNpmPackageInstallsIntoACleanProject(t *testing.T) {
	tgz := distFiles(t, "npm/*.tgz")[0]
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "clean", "private": true, "type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	runIn(t, dir, []string{"npm_config_cache=" + t.TempDir()}, "npm", "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", tgz)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@airlock-dev", "sdk", "LICENSE")); err != nil {
		t.Errorf("the package carries no LICENSE: %v", err)
	}
	out := runIn(t, dir, nil, "node", "--input-type=module", "-e",
		`import { toolDefinitions, Sandbox } from "@airlock-dev/sdk"; console.log(typeof Sandbox.create, toolDefinitions({ installed: "Node.js 22" }).map((t) => t.name).join(","))`)
	if strings.TrimSpace(out) != "function run_command,run_python" {
		t.Errorf("the installed package says %q", out)
	}
}
