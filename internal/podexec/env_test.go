package podexec

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"airlock.dev/airlock/internal/pid1link"
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
		Rewrite:    map[string]string{DefaultWrapperPath: wrapperBin},
		Supervisor: wrapperBin, // the container's PID 1
		Env:        []string{"HOME=" + home},
		Dir:        home,
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

// keyed returns req with the server's supervisor key, as the gateway sets it from the Sandbox's status.
func (e *testEnv) keyed(req Request) Request {
	if req.SupervisorKey == "" {
		req.SupervisorKey = e.srv.SupervisorKey()
	}
	return req
}

// someKey is a well-formed supervisor key no server holds, for engines whose exec never gets that far.
var someKey = func() string {
	id, err := pid1link.NewIdentity()
	if err != nil {
		panic(err)
	}
	return id.PublicKey()
}()

func (e *testEnv) run(t testing.TB, req Request) *Result {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace, req.Pod = "ns", "sandbox-0"
	}
	req = e.keyed(req)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := e.eng.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%v %q): %v", req.Argv, req.Shell, err)
	}
	return res
}
