package exec

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"airlock.dev/airlock/internal/testutil/execserver"
)

// wrapperBin is the real wrapper, built once; the test server runs it where
// the container would run /airlock/bin/airlock-init.
var wrapperBin string

func TestMain(m *testing.M) {
	// The streaming servers log every closed connection; that is the tests'
	// normal business, not news.
	klog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "exec-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if wrapperBin, err = execserver.BuildWrapper(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var protocols = []Protocol{ProtocolWebSocket, ProtocolSPDY, ProtocolAuto}

type testEnv struct {
	srv  *execserver.Server
	eng  *Engine
	home string // the "sandbox" HOME, where full outputs land
}

// newEnv starts a server whose "container" runs the real wrapper, and an
// engine for it.
func newEnv(t testing.TB, p Protocol, mod func(*execserver.Options, *Options)) *testEnv {
	t.Helper()
	home := t.TempDir()
	so := execserver.Options{
		Rewrite: map[string]string{DefaultWrapperPath: wrapperBin},
		Env:     []string{"HOME=" + home},
		Dir:     home,
	}
	eo := Options{Protocol: p, Grace: 300 * time.Millisecond}
	if mod != nil {
		mod(&so, &eo)
	}
	srv := execserver.Start(so)
	t.Cleanup(srv.Close)
	eng, err := New(srv.RESTConfig(), eo)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{srv: srv, eng: eng, home: home}
}

func (e *testEnv) run(t testing.TB, req Request) *Result {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace, req.Pod = "ns", "sandbox-0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := e.eng.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%v %q): %v", req.Argv, req.Shell, err)
	}
	return res
}

// uniqueSleep returns a sleep argument no other process uses; such sleeps
// are killed when the test ends, whatever its outcome.
func uniqueSleep(t testing.TB) string {
	s := fmt.Sprintf("%d.%06d", 900+rand.IntN(99), rand.IntN(1000000))
	t.Cleanup(func() {
		for _, pid := range sleepers(s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return s
}

// sleepers lists live `sleep arg` processes.
func sleepers(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Equal(b, []byte("sleep\x00"+arg+"\x00")) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); err == nil && i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func waitNoSleepers(t testing.TB, arg string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(sleepers(arg)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %s still running after %v: %v", arg, d, sleepers(arg))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitSleepers(t testing.TB, arg string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(sleepers(arg)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d `sleep %s`, have %v", n, arg, sleepers(arg))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
