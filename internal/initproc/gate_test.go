package initproc

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"airlock.dev/airlock/internal/version"
)

func gateDialer() *net.Dialer { return &net.Dialer{Timeout: 100 * time.Millisecond} }

func TestWaitBlockedReturnsOnceConnectsAreRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go acceptAndClose(l)
	// The "policy" takes effect after 300ms: the listener goes away and connects are refused.
	time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	gate, took, err := WaitBlocked(gateDialer(), addr, 10*time.Second)
	if err != nil {
		t.Fatalf("want success once the address became unreachable: %v", err)
	}
	if gate != GateRefused {
		t.Errorf("gate %q, want refused", gate)
	}
	if took < 250*time.Millisecond {
		t.Errorf("returned after %s, before the address became unreachable", took)
	}
}

func TestWaitBlockedFailsWhileReachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAndClose(l)
	_, _, err = WaitBlocked(gateDialer(), l.Addr().String(), 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still reachable") {
		t.Fatalf("want a 'still reachable' error, got %v", err)
	}
}

// A dropped SYN is a timeout: a loopback listener whose accept queue is full drops new SYNs, as a DROP rule does.
func TestWaitBlockedCountsADropAsTimeout(t *testing.T) {
	addr := fullBacklogListener(t)
	gate, _, err := WaitBlocked(gateDialer(), addr, 5*time.Second)
	if err != nil || gate != GateTimeout {
		t.Fatalf("want gate timeout, got %q, %v", gate, err)
	}
}

// Errors that are not a policy's reject or drop prove nothing. Without this check (any dial error counting as
// isolated, as before) this test fails: the dial below fails locally, binding an address this host does not have
// (TEST-NET-1), and no packet is sent.
func TestWaitBlockedDoesNotCountOtherErrors(t *testing.T) {
	d := gateDialer()
	d.LocalAddr = &net.TCPAddr{IP: net.ParseIP("192.0.2.1")}
	_, _, err := WaitBlocked(d, "127.0.0.1:9", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not proven") {
		t.Fatalf("want 'not proven' for an address error, got %v", err)
	}
}

func TestBlockedBy(t *testing.T) {
	connect := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
	}
	for errno, want := range map[syscall.Errno]Gate{
		syscall.ECONNREFUSED:  GateRefused,
		syscall.EHOSTUNREACH:  GateProhibited,
		syscall.ENETUNREACH:   "",
		syscall.EADDRNOTAVAIL: "",
		syscall.EACCES:        "",
		syscall.EPERM:         "",
	} {
		got, ok := blockedBy(connect(errno))
		if got != want || ok != (want != "") {
			t.Errorf("%v: got %q %v, want %q", errno, got, ok, want)
		}
	}
}

// gateOf parses pid1's gate flags as PID1 does, with a termination log in a temp dir.
func gateOf(t *testing.T, args ...string) *gateConfig {
	t.Helper()
	fs := flag.NewFlagSet("pid1", flag.ContinueOnError)
	var g gateConfig
	g.bind(fs)
	g.localTargets = true // loopback stands in for the node
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	return &g
}

// The gate says what it saw in the container's log: the kernel, the marker, the target and how it was blocked.
func TestGateLogsWhatItSaw(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close() // a closed port: refused
	var log bytes.Buffer
	seen, err := gateOf(t, "--gate-host", host, "--gate-port", port, "--gate-timeout", "5s").run(&log)
	if err != nil {
		t.Fatal(err)
	}
	if seen.target != net.JoinHostPort(host, port) || seen.gate != GateRefused {
		t.Errorf("the gate reports %+v, want %s refused", seen, net.JoinHostPort(host, port))
	}
	kernel, _ := kernelRelease()
	if want := fmt.Sprintf("kernel %s, isolation none; network isolation in effect after", kernel); !strings.Contains(log.String(), want) ||
		!strings.Contains(log.String(), net.JoinHostPort(host, port)+" refused") {
		t.Errorf("log %q: want %q and the target refused", log.String(), want)
	}
}

// TestGateReachesTheProxyAfterTheBlock: with a proxy target, the gate passes only once the proxy was reached;
// an unreachable proxy fails the gate with a message that says so.
func TestGateReachesTheProxyAfterTheBlock(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	run := func(proxyTarget string) (string, error) {
		var log bytes.Buffer
		_, err := gateOf(t, "--gate-host", host, "--gate-port", port, "--gate-timeout", "1s", "--proxy-target", proxyTarget).run(&log)
		return log.String(), err
	}
	if log, err := run(proxy.Addr().String()); err != nil || !strings.Contains(log, "egress proxy "+proxy.Addr().String()+" reached") {
		t.Errorf("reachable proxy: %v, log %q", err, log)
	}
	_, err = run(net.JoinHostPort(host, port)) // nothing listens there
	if err == nil || !strings.Contains(err.Error(), "the egress proxy") || !strings.Contains(err.Error(), "is not reachable from the sandbox") {
		t.Errorf("unreachable proxy: %v", err)
	}
}

// TestGateChecksTheRuntime: a runtime that is the opposite of the promised isolation fails the gate with
// RuntimeMismatchPrefix, which the controller turns into RuntimeMismatch; gVisor is proven by its marker, else by
// its boot lines in the kernel log, and without either it is attested unverified (the controller judges it).
func TestGateChecksTheRuntime(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "kernel_is_gvisor")
	kernel, _ := kernelRelease()
	gvisorLog := func() ([]byte, error) { return []byte(gvisorKernelLog), nil }
	hostLog := func() ([]byte, error) { return []byte(linuxKernelLog), nil }
	refused := func() ([]byte, error) { return nil, fmt.Errorf("syslog(2): %w", syscall.EPERM) }
	for _, tc := range []struct {
		name     string
		args     []string
		marker   bool
		klog     func() ([]byte, error)
		mismatch bool
		want     runtimeProof
	}{
		{"gvisor with its marker", []string{"--expect-isolation=gvisor"}, true, refused, false, runtimeProof{isolation: "gvisor", method: MethodMarker}},
		{"gvisor by its kernel log", []string{"--expect-isolation=gvisor"}, false, gvisorLog, false, runtimeProof{isolation: "gvisor", method: MethodKernelLog}},
		{"gvisor unproven: log refused", []string{"--expect-isolation=gvisor"}, false, refused, false,
			runtimeProof{isolation: Unverified, unverified: "is absent (runsc runs without --gvisor-marker-file) and the kernel log (syslog(2)) cannot be read (syslog(2): operation not permitted)"}},
		{"gvisor unproven: a real kernel's log", []string{"--expect-isolation=gvisor"}, false, hostLog, false,
			runtimeProof{isolation: Unverified, unverified: "and the kernel log (syslog(2)) holds no gVisor boot line"}},
		{"vm on a kernel no node runs", []string{"--expect-isolation=vm", "--host-kernel=6.1.0-node"}, false, gvisorLog, false, runtimeProof{isolation: "vm", method: MethodKernel}},
		{"vm on a node's kernel", []string{"--expect-isolation=vm", "--host-kernel=6.1.0-node", "--host-kernel=" + kernel}, false, hostLog, true, runtimeProof{}},
		{"vm that is gVisor", []string{"--expect-isolation=vm", "--host-kernel=6.1.0-node"}, true, gvisorLog, true, runtimeProof{}},
		{"none", nil, false, gvisorLog, false, runtimeProof{isolation: "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			if tc.marker {
				_ = os.WriteFile(marker, []byte("gvisor\n"), 0o444)
			}
			g := gateOf(t, tc.args...)
			g.marker, g.kernelLog = marker, tc.klog
			seen, err := g.run(io.Discard)
			if got := err != nil && strings.HasPrefix(err.Error(), RuntimeMismatchPrefix); got != tc.mismatch || (err != nil && !got) {
				t.Fatalf("err %v, want mismatch %v", err, tc.mismatch)
			}
			if tc.mismatch {
				return
			}
			got := seen.runtime
			if got.isolation != tc.want.isolation || got.method != tc.want.method || !strings.Contains(got.unverified, tc.want.unverified) ||
				(tc.want.unverified == "") != (got.unverified == "") {
				t.Errorf("proved %+v, want %+v", got, tc.want)
			}
		})
	}
}

// gvisorKernelLog is what gVisor's Sentry answers syslog(2) with (pkg/sentry/kernel/syslog.go: "<6>[%11.6f] %s\n",
// "Starting gVisor..." at 0, ten of its lines, "Ready!"), as seen under runsc on the local cluster.
const gvisorKernelLog = "<6>[   0.000000] Starting gVisor...\n" +
	"<6>[   0.512345] Reticulating splines...\n" +
	"<6>[   0.901234] Digging up root...\n" +
	"<6>[   1.234567] Ready!\n"

// linuxKernelLog is the start of a real kernel's log as syslog(2) returns it.
const linuxKernelLog = "<5>[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)\n" +
	"<6>[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=/dev/vda ro\n"

// Only gVisor's own first line proves gVisor: the same words anywhere else, or logged as anything but the
// kernel's own message at time 0, do not. Fails with the check loosened to "the log mentions Starting gVisor":
// checked.
func TestGVisorBooted(t *testing.T) {
	for log, want := range map[string]bool{
		gvisorKernelLog:                       true,
		"<6>[   0.000000] Starting gVisor...": true, // no newline after it
		linuxKernelLog:                        false,
		"":                                    false,
		// A line a process wrote to /dev/kmsg gets the user facility and the time it was written.
		linuxKernelLog + "<14>[ 5012.000001] Starting gVisor...\n": false,
		"<14>[ 5012.000001] Starting gVisor...\n":                  false,
		// The ring buffer wrapped: its first record is a later one, never at time 0.
		"<6>[ 8123.417000] Starting gVisor...\n":                                      false,
		"<6>[   0.000000] Starting gVisor... and more\n":                              false,
		" <6>[   0.000000] Starting gVisor...\n":                                      false,
		"<6>[   0.000000] Linux version 4.4.0\n<6>[   0.000000] Starting gVisor...\n": false,
	} {
		if got := gvisorBooted([]byte(log)); got != want {
			t.Errorf("%q: %v, want %v", log, got, want)
		}
	}
}

// The real kernel this runs on is never taken for gVisor: syslog(2) either refuses or answers with its own log.
func TestRealKernelLogIsNotGVisor(t *testing.T) {
	log, err := readKernelLog()
	if err == nil && gvisorBooted(log) {
		t.Fatalf("this machine's kernel log was taken for gVisor's: %q", log[:min(len(log), 200)])
	}
	t.Logf("syslog(2) here: %d bytes, err %v", len(log), err)
	g := gateOf(t, "--expect-isolation=gvisor")
	g.marker = filepath.Join(t.TempDir(), "absent")
	seen, err := g.run(io.Discard)
	if err != nil || seen.runtime.isolation != Unverified {
		t.Fatalf("a gVisor handler on a real kernel: %+v, %v; want unverified", seen, err)
	}
}

// TestPID1FailsItsGateIntoTheTerminationLog: a gate that fails ends PID 1 with exit 1 and the reason in the
// termination log, before it serves any command.
func TestPID1FailsItsGateIntoTheTerminationLog(t *testing.T) {
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	kernel, _ := kernelRelease()
	if code := PID1([]string{"--expect-isolation=vm", "--host-kernel=" + kernel, "--termination-log", termLog}, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	if b, _ := os.ReadFile(termLog); !strings.HasPrefix(string(b), RuntimeMismatchPrefix) {
		t.Errorf("termination log %q: want the runtime mismatch", b)
	}
	for _, bad := range [][]string{{"--expect-isolation=kata"}, {"--expect-isolation=vm"}, {"extra"}} {
		if code := PID1(bad, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
}

// TestPID1RefusesAnotherProtocol: told a protocol other than its own (an image's airlock-init of another
// release), PID 1 ends before its gate and any command, with the mismatch in the termination log; its own
// protocol, or none (not checked), goes on to the gate.
func TestPID1RefusesAnotherProtocol(t *testing.T) {
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	args := []string{"--protocol=" + strconv.Itoa(version.InitProtocol+1), "--termination-log", termLog}
	if code := PID1(args, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(termLog)
	if !strings.HasPrefix(string(b), InitMismatchPrefix) || !strings.Contains(string(b), "init to Volume") {
		t.Errorf("termination log %q: want the init mismatch and what to change", b)
	}
	// Its own protocol passes the check: the gate then fails on this machine (a VM's handler on a node's
	// kernel), as it would without the flag.
	kernel, _ := kernelRelease()
	for _, p := range []string{strconv.Itoa(version.InitProtocol), "0"} {
		_ = os.WriteFile(termLog, nil, 0o644)
		if code := PID1([]string{"--protocol=" + p, "--expect-isolation=vm", "--host-kernel=" + kernel, "--termination-log", termLog}, io.Discard); code != 1 {
			t.Fatalf("--protocol=%s: exit %d, want the gate's 1", p, code)
		}
		if b, _ := os.ReadFile(termLog); !strings.HasPrefix(string(b), RuntimeMismatchPrefix) {
			t.Errorf("--protocol=%s: termination log %q: want the gate's runtime mismatch", p, b)
		}
	}
}

func TestGVisorMarker(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "kernel_is_gvisor")
	if hasGVisorMarker(marker) {
		t.Error("a missing marker must be no")
	}
	_ = os.WriteFile(marker, []byte("gvisor\n"), 0o444)
	if !hasGVisorMarker(marker) {
		t.Error("gVisor's marker content must be yes")
	}
	_ = os.WriteFile(marker, []byte("other\n"), 0o444)
	if hasGVisorMarker(marker) {
		t.Error("other content must be no")
	}
}

// acceptAndClose plays a listening port: it accepts and drops connections until l is closed.
func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// fullBacklogListener returns a loopback address whose listener never accepts and whose accept queue is full,
// so the kernel drops further SYNs.
func fullBacklogListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the queue is full: this SYN was dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("the accept queue of %s never filled", addr)
	return ""
}

// A probe not answered within the hold gets 503, so the kubelet counts a failure and asks again; one made after
// the gate passed gets 200 at once, or 503 while the supervisor cannot accept sessions; a request that never ends
// its head gets nothing.
func TestReadyServerHoldsThenAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	p, _ := strconv.Atoi(port)
	s, err := listenReady(p, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	s.holdFor = 300 * time.Millisecond
	get := func() (int, time.Duration) {
		start := time.Now()
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, took := get(); code != http.StatusServiceUnavailable || took < 300*time.Millisecond {
		t.Errorf("before the gate: %d after %s, want 503 after the hold", code, took)
	}
	var unhealthy atomic.Bool
	s.pass(func() error {
		if unhealthy.Load() {
			return errors.New("cannot accept sessions")
		}
		return nil
	})
	if code, took := get(); code != http.StatusOK || took > time.Second {
		t.Errorf("after the gate: %d after %s, want 200 at once", code, took)
	}
	unhealthy.Store(true)
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Errorf("with the supervisor unhealthy: %d, want 503", code)
	}
	unhealthy.Store(false)
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\n")) // no end of head
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, _ := c.Read(make([]byte, 64)); n != 0 {
		t.Errorf("an unfinished request head got %d bytes of answer", n)
	}
}
