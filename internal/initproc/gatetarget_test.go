package initproc

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckGateHost(t *testing.T) {
	for host, ok := range map[string]bool{
		"10.0.0.7": true, "192.0.2.1": true, "fd00::7": true, "169.254.1.1": true,
		"": false, "127.0.0.1": false, "127.1.2.3": false, "::1": false, "::ffff:127.0.0.1": false,
		"0.0.0.0": false, "::": false, "localhost": false, "node.example": false, "$(AIRLOCK_NODE_IP)": false,
	} {
		if err := CheckGateHost(host); (err == nil) != ok {
			t.Errorf("%q: %v, want accepted=%v", host, err, ok)
		}
	}
}

// TestPID1RefusesAGateTargetThatProvesNothing: a PID 1 whose gate target is empty (a tenant's
// AIRLOCK_NODE_IP="" once emptied --gate-host), loopback, unspecified or a name fails with the reason in its
// termination log instead of serving commands. The port is a real loopback port that refuses connections, as
// the pod's own loopback would: without CheckGateHost the gate "passes" on that refusal (or is skipped when
// empty) and PID 1 goes on to serve, which this test reports after a few seconds: checked.
func TestPID1RefusesAGateTargetThatProvesNothing(t *testing.T) {
	port := refusingLoopbackPort(t)
	for _, host := range []string{"127.0.0.1", "::1"} {
		if gate, _, err := WaitBlocked(gateDialer(), net.JoinHostPort(host, strconv.Itoa(port)), time.Second); gate != GateRefused {
			t.Fatalf("the loopback port on %s must refuse, as the pod's own loopback does: %q %v", host, gate, err)
		}
	}
	for _, host := range []string{"", "127.0.0.1", "::1", "0.0.0.0", "::", "localhost", "$(AIRLOCK_NODE_IP)"} {
		t.Run(host, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(termLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--gate-host=" + host, "--gate-port=" + strconv.Itoa(port), "--gate-timeout=2s", "--termination-log", termLog}
			var stderr bytes.Buffer
			code := make(chan int, 1)
			go func() { code <- PID1(args, &stderr) }()
			select {
			case c := <-code:
				if c != 1 {
					t.Fatalf("exit %d, want 1", c)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("PID 1 passed its gate on %q and serves commands", host)
			}
			b, _ := os.ReadFile(termLog)
			if !strings.Contains(string(b), "network gate target") || (host != "" && !strings.Contains(string(b), host)) {
				t.Errorf("termination log %q: want the gate target refused, naming it; PID 1 said:\n%s", b, stderr.String())
			}
		})
	}
}

// refusingLoopbackPort returns a loopback port that refuses connections for the whole test: bound by a socket
// that never listens, so no other process can take it.
func refusingLoopbackPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// Dual-stack on the unspecified address: the port is taken on 127.0.0.1 and ::1 alike.
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet6{}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet6).Port
}
