package initproc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock.dev/airlock/internal/verdict"
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
	if gate != verdict.GateRefused {
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
	if err != nil || gate != verdict.GateTimeout {
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
	for errno, want := range map[syscall.Errno]verdict.Gate{
		syscall.ECONNREFUSED:  verdict.GateRefused,
		syscall.EHOSTUNREACH:  verdict.GateProhibited,
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

// Setup leaves a verdict the controller can parse: the gate's target and result, and the kernel it runs on.
func TestSetupWritesVerdict(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close() // a closed port: refused
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := Setup([]string{"--install-dir", t.TempDir(), "--gate-host", host, "--gate-port", port,
		"--gate-timeout", "5s", "--termination-log", termLog}, &stderr); code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(termLog)
	v, err := verdict.Parse(string(b))
	if err != nil {
		t.Fatalf("termination log %q: %v", b, err)
	}
	kernel, _ := kernelRelease()
	if v.Target != net.JoinHostPort(host, port) || v.Gate != verdict.GateRefused || v.Kernel != kernel || kernel == "" || v.GVisorMarker {
		t.Errorf("verdict %+v: want target %s:%s, refused, kernel %q, no gVisor marker", v, host, port, kernel)
	}
}

// TestSetupReachesTheProxyAfterTheBlock: with a proxy target, the verdict names it only once it was reached;
// an unreachable proxy fails the gate with a message that says so.
func TestSetupReachesTheProxyAfterTheBlock(t *testing.T) {
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
	run := func(proxyTarget string) (int, string, string) {
		termLog := filepath.Join(t.TempDir(), "termination-log")
		if err := os.WriteFile(termLog, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		code := Setup([]string{"--install-dir", t.TempDir(), "--gate-host", host, "--gate-port", port,
			"--gate-timeout", "1s", "--proxy-target", proxyTarget, "--termination-log", termLog}, &stderr)
		b, _ := os.ReadFile(termLog)
		return code, string(b), stderr.String()
	}
	code, log, stderr := run(proxy.Addr().String())
	if code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	if v, err := verdict.Parse(log); err != nil || v.Proxy != proxy.Addr().String() {
		t.Errorf("verdict %q (%v): want proxy=%s", log, err, proxy.Addr())
	}
	code, log, _ = run(net.JoinHostPort(host, port)) // nothing listens there
	if code == 0 || !strings.Contains(log, "the egress proxy") || !strings.Contains(log, "is not reachable from the sandbox") {
		t.Errorf("unreachable proxy: exit %d, %q", code, log)
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

func TestSetupInstallsItselfAndChecksFlags(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	if code := Setup([]string{"--install-dir", dir}, &stderr); code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr.String())
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(filepath.Join(dir, "airlock-init"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed copy differs from the running binary (err %v)", err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "airlock-init")); fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want r-xr-xr-x", fi.Mode().Perm())
	}
	if code := Setup(nil, &stderr); code != 2 {
		t.Errorf("missing --install-dir: exit %d, want 2", code)
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
