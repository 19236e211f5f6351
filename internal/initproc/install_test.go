package initproc

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Install copies the running binary whole, read-only and executable, and the copy runs: here the test binary,
// which lists its own tests.
func TestInstallCopiesItself(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "airlock-init")
	if code := Install([]string{dest}, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the binary (%d of %d bytes): %v", len(got), len(want), err)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want r-xr-xr-x", fi.Mode())
	}
	out, err := exec.Command(dest, "-test.list", "TestInstallCopiesItself").Output()
	if err != nil || !strings.Contains(string(out), "TestInstallCopiesItself") {
		t.Errorf("the copy does not run: %v %q", err, out)
	}
	entries, _ := os.ReadDir(filepath.Dir(dest))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

func TestInstallRefusals(t *testing.T) {
	for _, args := range [][]string{nil, {""}, {"a", "b"}} {
		if code := Install(args, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	var stderr bytes.Buffer
	if code := Install([]string{filepath.Join(t.TempDir(), "missing", "airlock-init")}, &stderr); code != 1 || !strings.Contains(stderr.String(), "creating the copy") {
		t.Errorf("a directory that does not exist: exit %d %q", code, stderr.String())
	}
}
