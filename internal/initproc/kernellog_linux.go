package initproc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// readKernelLog reads the kernel log with syslog(2) (SYSLOG_ACTION_READ_ALL, which does not consume it). A real
// kernel refuses it to an unprivileged reader (dmesg_restrict, or the RuntimeDefault seccomp profile without
// CAP_SYSLOG); gVisor answers everyone with its own log.
func readKernelLog() ([]byte, error) {
	buf := make([]byte, kernelLogBytes)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return nil, fmt.Errorf("syslog(2): %w", err)
	}
	return buf[:n], nil
}
