//go:build !linux

package initproc

import "errors"

// readKernelLog has no kernel log to read off Linux; only the CLI, which shares this package's constants, is
// built there.
func readKernelLog() ([]byte, error) {
	return nil, errors.New("syslog(2) is Linux's")
}
