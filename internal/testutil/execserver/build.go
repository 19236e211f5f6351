package execserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// WrapperPackage is the stand-in for airlock-init (pid1, exec, status) built
// by BuildWrapper.
const WrapperPackage = "airlock.dev/airlock/internal/runwrap/testbin"

// BuildWrapper builds the wrapper (static, as in the image) into dir and
// returns its path. The caller must run inside the module.
func BuildWrapper(dir string) (string, error) {
	out := filepath.Join(dir, "airlock-init")
	cmd := exec.Command("go", "build", "-o", out, WrapperPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", WrapperPackage, err, b)
	}
	return out, nil
}
