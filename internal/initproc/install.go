package initproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install is `airlock-init install DEST`: it copies this binary to DEST, where the init image cannot be
// mounted as an image volume (the pod's init container, sandbox.InitCopyContainer). The copy is written beside
// DEST and renamed into place, so DEST is this binary whole or absent, never a part of it.
func Install(args []string, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(stderr, "usage: airlock-init install DEST")
		return 2
	}
	if err := installSelf(args[0]); err != nil {
		fmt.Fprintln(stderr, "airlock-init install:", err)
		return 1
	}
	return 0
}

func installSelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	return copyExecutable(self, dest)
}

// copyExecutable copies src to dest, read-only and executable for all, through a temporary file in dest's
// directory.
func copyExecutable(src, dest string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*")
	if err != nil {
		return fmt.Errorf("creating the copy: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := errors.Join(tmp.Chmod(0o555), tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("writing the copy: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("moving the copy to %s: %w", dest, err)
	}
	return nil
}
