package runwrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// wrapperBin is the `airlock-init run` stand-in built once for the package.
var wrapperBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runwrap-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wrapperBin = filepath.Join(dir, "airlock-init")
	build := exec.Command("go", "build", "-o", wrapperBin, "./testbin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build wrapper: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const testNonce = "test-nonce-0123456789abcdef"

type runResult struct {
	stdout, stderr string // stderr without the trailer
	trailer        *Trailer
	code           int
	elapsed        time.Duration
}

// wrapperCmd prepares `airlock-init run --nonce N --out-dir D ARGS...`.
func wrapperCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return wrapperCmdDir(filepath.Join(t.TempDir(), "out"), args...)
}

func wrapperCmdDir(outDir string, args ...string) *exec.Cmd {
	full := append([]string{"run", "--nonce", testNonce, "--out-dir", outDir}, args...)
	return child.DieWithParent(exec.Command(wrapperBin, full...))
}

// runWrapper runs the wrapper to completion and splits off the trailer.
func runWrapper(t *testing.T, stdin *string, args ...string) runResult {
	t.Helper()
	return runCmd(t, wrapperCmd(t, args...), stdin)
}

func runCmd(t *testing.T, cmd *exec.Cmd, stdin *string) runResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = strings.NewReader(*stdin)
	}
	start := time.Now()
	err := cmd.Run()
	res := runResult{stdout: out.String(), elapsed: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run wrapper: %v", err)
	}
	res.stderr, res.trailer = splitTrailer(t, errb.String())
	return res
}

func splitTrailer(t *testing.T, s string) (string, *Trailer) {
	t.Helper()
	i := strings.LastIndex(s, "\n"+testNonce+" ")
	if i < 0 || !strings.HasSuffix(s, "\n") {
		return s, nil
	}
	var tr Trailer
	if err := json.Unmarshal([]byte(s[i+len(testNonce)+2:len(s)-1]), &tr); err != nil {
		t.Fatalf("bad trailer %q: %v", s[i:], err)
	}
	return s[:i], &tr
}

func ptr(s string) *string { return &s }
