package initproc

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock.dev/airlock/internal/version"
)

// terminationLog is where Kubernetes reads a container's last words into its status (Terminated.Message).
const terminationLog = "/dev/termination-log"

// RuntimeMismatchPrefix starts the termination message of a pod whose runtime, seen from inside, is not the
// isolation its RuntimeClass promised: the controller fails the Sandbox with RuntimeMismatch on it.
const RuntimeMismatchPrefix = "runtime mismatch: "

// InitMismatchPrefix starts the termination message of a PID 1 told to speak another protocol than its own
// (version.InitProtocol): an image's own airlock-init of another release. The controller fails the Sandbox
// with InitMismatch on it.
const InitMismatchPrefix = "init mismatch: "

// Expected isolations (--expect-isolation), as the controller derives them from the RuntimeClass handler.
const (
	ExpectGVisor = "gvisor"
	ExpectVM     = "vm"
	ExpectNone   = "none"
)

// Gate says how the network gate saw its target blocked. Each is something a policy does to a port that is
// known to listen; "nothing listens" and "no route" are not among them.
type Gate string

const (
	// GateRefused is a reject: a RST or ICMP port-unreachable (ECONNREFUSED).
	GateRefused Gate = "refused"
	// GateTimeout is a drop: the connection attempt got no answer within the dial timeout.
	GateTimeout Gate = "timeout"
	// GateProhibited is an ICMP host- or admin-prohibited reject (EHOSTUNREACH).
	GateProhibited Gate = "prohibited"
)

// gateConfig is what PID 1 proves before it serves any command: the runtime's isolation, then the network
// policy's. NetworkPolicy enforcers program a new pod's rules only after it has an IP, so a pod can reach out
// for a moment after it starts; no command may run in that window.
type gateConfig struct {
	host, proxyTarget string
	port              int
	timeout           time.Duration
	expect            string
	hostKernels       []string
	termLog           string
	marker            string
	// kernelLog reads the kernel log (readKernelLog; tests stand in for it).
	kernelLog func() ([]byte, error)
	readyPort int
	protocol  int
	// localTargets lets an empty host skip the network gate and a loopback one count (PID1ForTests).
	localTargets bool
}

// bind registers the gate's flags on fs.
func (g *gateConfig) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.host, "gate-host", "", "IP address outside the pod that listens and that the sandbox's policy blocks, e.g. the node's; required: empty, loopback or unspecified fails the pod")
	fs.IntVar(&g.port, "gate-port", 10250, "port on gate-host that listens but is blocked by the sandbox's policy (the kubelet's)")
	fs.DurationVar(&g.timeout, "gate-timeout", 30*time.Second, "how long to wait for isolation before failing the pod")
	fs.StringVar(&g.proxyTarget, "proxy-target", "", "host:port of the egress proxy, which must be reached once the gate target is blocked (Restricted sandboxes with an allowlist)")
	fs.StringVar(&g.expect, "expect-isolation", ExpectNone, "isolation the runtime must give, checked from inside: gvisor (gVisor's marker file, else its boot lines in the kernel log; neither: attested unverified), vm (a kernel no node runs) or none")
	fs.Func("host-kernel", "a kernel release the nodes run (repeatable): under --expect-isolation=vm the pod's kernel must be none of them", func(s string) error {
		g.hostKernels = append(g.hostKernels, s)
		return nil
	})
	fs.StringVar(&g.termLog, "termination-log", terminationLog, "file a failure is written to (Kubernetes creates it)")
	fs.IntVar(&g.readyPort, "ready-port", 0, "TCP port that answers HTTP 200 once the gate passed (the pod's httpGet readiness probe); 0: none")
	fs.IntVar(&g.protocol, "protocol", 0, "the manager's init protocol; another than this binary's fails the pod (0: not checked)")
	g.marker = gvisorMarker
	g.kernelLog = readKernelLog
	g.localTargets = localGateTargets
}

// checkProtocol refuses a manager that speaks another protocol than this binary: commands would fail in
// obscure ways later, so the pod fails now and says which side to change.
func (g *gateConfig) checkProtocol() error {
	if g.protocol == 0 || g.protocol == version.InitProtocol {
		return nil
	}
	return fmt.Errorf("%sthe manager speaks init protocol %d, but this airlock-init (release %s) speaks %d: "+
		"give the image the airlock-init of the manager's release at /airlock/bin/airlock-init, or set its template's init to Volume",
		InitMismatchPrefix, g.protocol, version.Version, version.InitProtocol)
}

// check validates the flags.
func (g *gateConfig) check() error {
	switch g.expect {
	case ExpectGVisor, ExpectNone:
	case ExpectVM:
		if len(g.hostKernels) == 0 {
			return errors.New("--expect-isolation=vm needs the nodes' kernels (--host-kernel)")
		}
	default:
		return fmt.Errorf("--expect-isolation %q is not gvisor, vm or none", g.expect)
	}
	if g.host != "" && (g.port <= 0 || g.port > 65535) {
		return fmt.Errorf("--gate-port %d is not a port", g.port)
	}
	if g.readyPort < 0 || g.readyPort > 65535 {
		return fmt.Errorf("--ready-port %d is not a port", g.readyPort)
	}
	return nil
}

// gateResult is what the gate saw: PID 1 attests it (package attestation).
type gateResult struct {
	kernel      string
	marker      bool
	runtime     runtimeProof
	target      string
	gate        Gate
	proxyTarget string
}

// run proves the runtime's isolation, then waits until the network policy is in effect, and says what it saw
// on log (the container's log). Its error goes into the termination log as well, so it shows in the Sandbox.
func (g *gateConfig) run(log io.Writer) (*gateResult, error) {
	kernel, err := kernelRelease()
	if err != nil {
		return nil, fmt.Errorf("reading the kernel release: %w", err)
	}
	marker := hasGVisorMarker(g.marker)
	proof, err := g.proveRuntime(kernel, marker)
	if err != nil {
		return nil, err
	}
	res := &gateResult{kernel: kernel, marker: marker, runtime: proof}
	if err := g.checkTarget(); err != nil {
		return nil, err
	}
	if g.host == "" { // only outside a pod (PID1ForTests)
		fmt.Fprintf(log, "airlock-init: kernel %s, %s; no network gate\n", kernel, proof)
		return res, nil
	}
	res.target = net.JoinHostPort(g.host, strconv.Itoa(g.port))
	gate, took, err := WaitBlocked(&net.Dialer{Timeout: 150 * time.Millisecond}, res.target, g.timeout)
	if err != nil {
		return nil, err
	}
	res.gate = gate
	proxy := ""
	if g.proxyTarget != "" {
		// Only after the block: before the policy applies everything is reachable, which proves nothing.
		if err := WaitReachable(&net.Dialer{Timeout: time.Second}, g.proxyTarget, max(g.timeout-took, time.Second)); err != nil {
			return nil, err
		}
		res.proxyTarget = g.proxyTarget
		proxy = ", egress proxy " + g.proxyTarget + " reached"
	}
	fmt.Fprintf(log, "airlock-init: kernel %s, %s; network isolation in effect after %s: %s %s%s\n",
		kernel, proof, took.Round(time.Millisecond), res.target, gate, proxy)
	return res, nil
}

// WaitBlocked dials target until an attempt is blocked the way a policy blocks a port that listens: refused
// (a reject), timed out (a drop) or host/admin-prohibited, and returns which and how long that took. A
// connection that succeeds means the policy is not yet in effect: it is closed and retried. Any other error
// (no route, network unreachable, an address error) proves nothing, since it is not the policy's doing: it
// is retried too, and reported if it lasts until the deadline.
func WaitBlocked(d *net.Dialer, target string, timeout time.Duration) (Gate, time.Duration, error) {
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
		// Not shorter: each dial of the default target (the kubelet's TLS port) is a line in the kubelet's log
		// ("TLS handshake error ... EOF"), and 5 ms measured no faster start.
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
func blockedBy(err error) (Gate, bool) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return GateTimeout, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return GateRefused, true
	case errors.Is(err, syscall.EHOSTUNREACH):
		return GateProhibited, true
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
