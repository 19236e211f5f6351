package initproc

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWaitUnreachableReturnsOnceConnectsFail(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go acceptAndClose(l)
	// The "policy" takes effect after 300ms: the listener goes away and connects are refused.
	time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	took, err := WaitUnreachable(addr, 10*time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("want success once the address became unreachable: %v", err)
	}
	if took < 250*time.Millisecond {
		t.Errorf("returned after %s, before the address became unreachable", took)
	}
}

func TestWaitUnreachableFailsWhileReachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAndClose(l)
	_, err = WaitUnreachable(l.Addr().String(), 300*time.Millisecond, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still reachable") {
		t.Fatalf("want a 'still reachable' error, got %v", err)
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
