// Package hack tests the scripts under hack/ that need no cluster.
package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// pathWithout builds a PATH directory holding links to every command the preflight uses except the missing
// ones, so the script runs for real against a machine that lacks them.
func pathWithout(t *testing.T, missing ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, c := range []string{"bash", "make", "git", "curl", "python3", "jq", "readelf", "openssl", "ip", "ss",
		"sha256sum", "flock", "go", "sed", "sort", "head", "date", "printf", "dirname", "cat", "node", "npm"} {
		if strings.Contains(" "+strings.Join(missing, " ")+" ", " "+c+" ") {
			continue
		}
		p, err := exec.LookPath(c)
		if err != nil {
			t.Fatalf("this machine lacks %s, which the test needs: run hack/preflight.sh", c)
		}
		if err := os.Symlink(p, filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runPreflight(t *testing.T, path string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "hack", "preflight.sh"), "--check")
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestPreflightPassesHere(t *testing.T) {
	if out, err := runPreflight(t, pathWithout(t)); err != nil {
		t.Fatalf("preflight on a complete machine: %v\n%s", err, out)
	}
}

// TestPreflightNamesWhatIsMissing: a machine without jq and readelf is refused up front, naming the Debian
// packages to install, instead of failing an hour into `make test`.
func TestPreflightNamesWhatIsMissing(t *testing.T) {
	out, err := runPreflight(t, pathWithout(t, "jq", "readelf"))
	if err == nil {
		t.Fatalf("preflight passed without jq and readelf:\n%s", out)
	}
	for _, want := range []string{"missing Debian packages", "binutils", "jq", "apt-get install"} {
		if !strings.Contains(out, want) {
			t.Errorf("preflight output lacks %q:\n%s", want, out)
		}
	}
}

// TestPreflightChecksGo: without go on PATH the preflight says so.
func TestPreflightChecksGo(t *testing.T) {
	out, err := runPreflight(t, pathWithout(t, "go"))
	if err == nil || !strings.Contains(out, "go is not on PATH") {
		t.Fatalf("want a refusal naming go, got err=%v:\n%s", err, out)
	}
}
