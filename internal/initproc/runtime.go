package initproc

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// gvisorMarker exists only under gVisor, and only with runsc's --gvisor-marker-file (docs/runtimes.md).
const gvisorMarker = "/proc/gvisor/kernel_is_gvisor"

// Unverified is what PID 1 attests when its handler promises gVisor and nothing it can see proves it: the
// controller then decides (the node's own kernel is a mismatch; anything else is refused unless the operator
// allows unverified isolation).
const Unverified = "unverified"

// How PID 1 proved its runtime's isolation (the attestation's method).
const (
	// MethodMarker: gVisor's marker file, which runsc creates in its own /proc with --gvisor-marker-file.
	MethodMarker = "marker"
	// MethodKernelLog: gVisor's boot lines, as syslog(2) answers them.
	MethodKernelLog = "kernel-log"
	// MethodKernel: a kernel release (uname) that none of the nodes runs.
	MethodKernel = "kernel"
)

// runtimeProof is what PID 1 found of its runtime's isolation, as it attests it.
type runtimeProof struct {
	// isolation is ExpectGVisor, ExpectVM, ExpectNone or Unverified.
	isolation string
	// method is the evidence that proved isolation (Method*), empty for none and unverified.
	method string
	// unverified says what was looked for and not found.
	unverified string
}

// String says what was proven, for PID 1's log.
func (p runtimeProof) String() string {
	switch {
	case p.unverified != "":
		return "isolation unverified: " + p.unverified
	case p.method != "":
		return "isolation " + p.isolation + " (" + p.method + ")"
	}
	return "isolation " + p.isolation
}

// proveRuntime checks the runtime against the isolation the RuntimeClass promised. gVisor proves itself by its
// marker file, else by its boot lines in the kernel log; a VM by a kernel that none of the nodes runs. Seeing
// the opposite of the promise (gVisor where a VM was promised, a node's kernel under a VM's handler) is a
// mismatch, which ends the pod; finding no proof of gVisor is unverified, which the controller judges. Both
// the marker (in /proc, which the runtime mounts) and the kernel log (a syscall's answer) are the runtime's:
// no file of the image can stand in for either.
func (g *gateConfig) proveRuntime(kernel string, marker bool) (runtimeProof, error) {
	switch g.expect {
	case ExpectGVisor:
		if marker {
			return runtimeProof{isolation: ExpectGVisor, method: MethodMarker}, nil
		}
		log, err := g.kernelLog()
		if err == nil && gvisorBooted(log) {
			return runtimeProof{isolation: ExpectGVisor, method: MethodKernelLog}, nil
		}
		return runtimeProof{isolation: Unverified, unverified: unprovenGVisor(g.marker, log, err)}, nil
	case ExpectVM:
		if marker {
			return runtimeProof{}, fmt.Errorf("%sthe RuntimeClass should give a VM, but gVisor's marker is present: this is gVisor", RuntimeMismatchPrefix)
		}
		if slices.Contains(g.hostKernels, kernel) {
			return runtimeProof{}, fmt.Errorf("%sthe RuntimeClass should give a VM, but from inside the pod the kernel is %q, which a node runs: this is the node's own kernel",
				RuntimeMismatchPrefix, kernel)
		}
		return runtimeProof{isolation: ExpectVM, method: MethodKernel}, nil
	}
	return runtimeProof{isolation: ExpectNone}, nil
}

// unprovenGVisor says what PID 1 looked for under a gVisor handler and did not find.
func unprovenGVisor(marker string, log []byte, err error) string {
	seen := "holds no gVisor boot line"
	switch {
	case err != nil:
		seen = "cannot be read (" + err.Error() + ")"
	case len(bytes.TrimSpace(log)) == 0:
		seen = "is empty"
	}
	return fmt.Sprintf("gVisor's marker %s is absent (runsc runs without --gvisor-marker-file) and the kernel log (syslog(2)) %s", marker, seen)
}

// gvisorBootLine is the first line of gVisor's kernel log: the Sentry answers syslog(2) with "Starting
// gVisor..." at time 0, then a few whimsical lines and "Ready!" (gVisor's pkg/sentry/kernel/syslog.go). On a
// real kernel the first record syslog(2) returns is the kernel's own first message at time 0 ("Linux version
// ...") or, once its ring buffer wrapped, a later one; and <6> is the kernel facility, which only the kernel's
// own printk logs under (a line written to /dev/kmsg, even by the host's root, gets the user facility, <8> and
// up). So only gVisor answers with this line first.
var gvisorBootLine = regexp.MustCompile(`^<6>\[ *0\.000000\] Starting gVisor\.\.\.$`)

// gvisorBooted reports whether a kernel log, as syslog(2) returns it, is gVisor's: its first line is gVisor's
// boot line.
func gvisorBooted(log []byte) bool {
	first, _, _ := strings.Cut(string(log), "\n")
	return gvisorBootLine.MatchString(first)
}

// kernelLogBytes is how much of the kernel log PID 1 reads: gVisor's is under 1 KiB; of a real kernel's,
// syslog(2) returns the newest records that fit.
const kernelLogBytes = 16 << 10

// hasGVisorMarker reports whether gVisor's marker file says so. Any doubt is "no".
func hasGVisorMarker(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == "gvisor"
}
