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
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock.dev/airlock/internal/verdict"
)

// terminationLog is where Kubernetes reads a container's last words into its status (Terminated.Message).
const terminationLog = "/dev/termination-log"

// gvisorMarker exists only under gVisor, and only with runsc's --gvisor-marker-file (docs/runtimes.md).
const gvisorMarker = "/proc/gvisor/kernel_is_gvisor"

// Setup runs in the sandbox pod's init container: it copies airlock-init into the shared tools volume and then
// waits until the pod's network isolation is in effect. NetworkPolicy enforcers program a new pod's rules only
// after it has an IP, so a pod can reach out for a moment after it starts; no command may run in that window.
// On success it leaves a verdict (internal/verdict) in the termination log: what the gate saw, and the kernel
// and gVisor marker it sees under the pod's runtime, from which the controller derives status.isolation.
func Setup(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	installDir := fs.String("install-dir", "", "directory to copy airlock-init into (required)")
	gateHost := fs.String("gate-host", "", "host of an address that listens and that the sandbox's policy blocks, e.g. the node IP; empty skips the gate")
	gatePort := fs.Int("gate-port", 10250, "port on gate-host that listens but is blocked by the sandbox's policy (the kubelet's)")
	gateTimeout := fs.Duration("gate-timeout", 30*time.Second, "how long to wait for isolation before failing the pod")
	proxyTarget := fs.String("proxy-target", "", "host:port of the egress proxy, which must be reached once the gate target is blocked (Restricted sandboxes with an allowlist)")
	termLog := fs.String("termination-log", terminationLog, "file the verdict or error is written to (Kubernetes creates it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *installDir == "" {
		fmt.Fprintln(stderr, "airlock-init setup: --install-dir is required")
		return 2
	}
	if err := install(*installDir); err != nil {
		return fail(stderr, *termLog, fmt.Errorf("installing airlock-init: %w", err))
	}
	if *gateHost == "" {
		return 0
	}
	kernel, err := kernelRelease()
	if err != nil {
		return fail(stderr, *termLog, fmt.Errorf("reading the kernel release: %w", err))
	}
	target := net.JoinHostPort(*gateHost, strconv.Itoa(*gatePort))
	gate, took, err := WaitBlocked(&net.Dialer{Timeout: 150 * time.Millisecond}, target, *gateTimeout)
	if err != nil {
		return fail(stderr, *termLog, err)
	}
	v := verdict.Verdict{Kernel: kernel, GVisorMarker: hasGVisorMarker(gvisorMarker), Gate: gate, Target: target, Took: took}
	if *proxyTarget != "" {
		// Only after the block: before the policy applies everything is reachable, which proves nothing.
		if err := WaitReachable(&net.Dialer{Timeout: time.Second}, *proxyTarget, max(*gateTimeout-took, time.Second)); err != nil {
			return fail(stderr, *termLog, err)
		}
		v.Proxy = *proxyTarget
	}
	fmt.Fprintf(stderr, "airlock-init: network isolation in effect after %s: %s %s\n", took.Round(time.Millisecond), target, gate)
	writeTerminationLog(stderr, *termLog, v.String())
	return 0
}

// WaitBlocked dials target until an attempt is blocked the way a policy blocks a port that listens: refused
// (a reject), timed out (a drop) or host/admin-prohibited, and returns which and how long that took. A
// connection that succeeds means the policy is not yet in effect: it is closed and retried. Any other error
// (no route, network unreachable, an address error) proves nothing, since it is not the policy's doing: it
// is retried too, and reported if it lasts until the deadline.
func WaitBlocked(d *net.Dialer, target string, timeout time.Duration) (verdict.Gate, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		conn, err := d.Dial("tcp", target)
		if err == nil {
			_ = conn.Close()
		} else if gate, ok := blockedBy(err); ok {
			return gate, time.Since(start), nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return "", 0, fmt.Errorf("network isolation not proven after %s: dialing %s fails with %v, which is not a policy's reject or drop (is the gate target right? the manager's --gate-target)", timeout, target, err)
			}
			return "", 0, fmt.Errorf("network isolation not in effect after %s: %s is still reachable from the sandbox (is a NetworkPolicy enforcer running?)", timeout, target)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReachable dials target until a connection succeeds: the egress proxy, which a Restricted sandbox's
// policy allows, must be reachable once the policy is in effect.
func WaitReachable(d *net.Dialer, target string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := d.Dial("tcp", target)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the egress proxy %s is not reachable from the sandbox after %s (%v): is it running (its Deployment in the Airlock namespace), and does a NetworkPolicy enforcer let its pods be reached?", target, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// blockedBy classifies a dial error: only what a policy does to a listening port counts.
func blockedBy(err error) (verdict.Gate, bool) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return verdict.GateTimeout, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return verdict.GateRefused, true
	case errors.Is(err, syscall.EHOSTUNREACH):
		return verdict.GateProhibited, true
	}
	return "", false
}

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// hasGVisorMarker reports whether gVisor's marker file says so. Any doubt is "no": the controller then refuses
// a runsc sandbox as unproven rather than trusting it.
func hasGVisorMarker(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == "gvisor"
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
func fail(stderr io.Writer, path string, err error) int {
	fmt.Fprintln(stderr, "airlock-init:", err)
	writeTerminationLog(stderr, path, err.Error())
	return 1
}

// writeTerminationLog writes msg to the termination log, which Kubernetes creates; outside a pod there is none.
func writeTerminationLog(stderr io.Writer, path, msg string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(msg)
		err = errors.Join(err, f.Close())
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stderr, "airlock-init: writing termination log:", err)
	}
}
