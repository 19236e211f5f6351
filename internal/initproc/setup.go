package initproc

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// terminationLog is where Kubernetes reads a container's last words into its status (Terminated.Message).
const terminationLog = "/dev/termination-log"

// Setup runs in the sandbox pod's init container: it copies airlock-init into the shared tools volume and then
// waits until the pod's network isolation is in effect. NetworkPolicy enforcers program a new pod's rules only
// after it has an IP, so a pod can reach out for a moment after it starts; no command may run in that window.
func Setup(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	installDir := fs.String("install-dir", "", "directory to copy airlock-init into (required)")
	gateHost := fs.String("gate-host", "", "an address that must become unreachable before the pod starts, e.g. the node IP; empty skips the gate")
	gatePort := fs.Int("gate-port", 10250, "port on gate-host that is listening but blocked by the sandbox's policy (the kubelet's)")
	gateTimeout := fs.Duration("gate-timeout", 30*time.Second, "how long to wait for isolation before failing the pod")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *installDir == "" {
		fmt.Fprintln(stderr, "airlock-init setup: --install-dir is required")
		return 2
	}
	if err := install(*installDir); err != nil {
		return fail(stderr, fmt.Errorf("installing airlock-init: %w", err))
	}
	if *gateHost == "" {
		return 0
	}
	target := net.JoinHostPort(*gateHost, strconv.Itoa(*gatePort))
	took, err := WaitUnreachable(target, *gateTimeout, 150*time.Millisecond)
	if err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stderr, "airlock-init: network isolation in effect after %s: %s unreachable\n", took.Round(time.Millisecond), target)
	return 0
}

// WaitUnreachable dials target until a connection attempt fails (refused or timed out) and returns how long
// that took. A connection that succeeds means the policy is not yet in effect: it is closed and retried.
func WaitUnreachable(target string, timeout, dialTimeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", target, dialTimeout)
		if err != nil {
			return time.Since(start), nil
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("network isolation not in effect after %s: %s is still reachable from the sandbox (is a NetworkPolicy enforcer running?)", timeout, target)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// install copies the running executable into dir atomically, so the sandbox container never sees half a file.
func install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".airlock-init-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, "airlock-init"))
}

// fail reports err on stderr and in the termination log, so it shows in the Sandbox's condition.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "airlock-init:", err)
	if werr := os.WriteFile(terminationLog, []byte(err.Error()), 0o644); werr != nil && !errors.Is(werr, os.ErrNotExist) {
		fmt.Fprintln(stderr, "airlock-init: writing termination log:", werr)
	}
	return 1
}
