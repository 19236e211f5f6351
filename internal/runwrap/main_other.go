//go:build !linux

package runwrap

import (
	"errors"
	"io"
)

// Main is only implemented on Linux, where sandboxes run.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, _ := ParseArgs(args)
	return wrapperFailed(cfg.Nonce, stderr, errors.New("airlock-init run is only supported on linux"))
}
