package exec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/execserver"
	"airlock.dev/airlock/internal/testutil/sleepers"
)

// fakeWrapper installs a script in place of the wrapper, for failures the
// real one never produces.
func fakeWrapper(t *testing.T, script string) func(*execserver.Options, *Options) {
	path := filepath.Join(t.TempDir(), "fake-wrapper")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return func(so *execserver.Options, eo *Options) { so.Rewrite[DefaultWrapperPath] = path }
}

// waitSleepers is sleepers.WaitCount for goroutines other than the test's,
// which must not call t.Fatal: it returns the failure instead.
func waitSleepers(arg string, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for len(sleepers.List(arg)) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("want %d `sleep %s`, have %v", n, arg, sleepers.List(arg))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// An exec that ends with a success status but no trailer (client-go reports
// an empty status as success too) must not become "exited 0".
func TestEngineEmptyStatusIsNotSuccess(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, fakeWrapper(t, "echo some output; exit 0"))
			res := env.run(t, Request{Argv: []string{"true"}})
			if res.Outcome != OutcomeSandboxLost || res.ExitCode != -1 || res.Stdout != "some output\n" {
				t.Fatalf("%+v", res)
			}
		})
	}
}

// The connection drops and the runtime kills the exec'd process (as
// containerd does): sandbox_lost, and the wrapper's supervisor kills the tree.
func TestEngineStreamLossKillsTree(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, nil)
			s := sleepers.Unique(t)
			dropped := make(chan error, 1)
			res, err := env.eng.Stream(t.Context(), Request{Namespace: "ns", Pod: "p", Shell: "echo started; setsid sleep " + s + " & sleep " + s},
				func(c Chunk) error {
					if strings.Contains(c.Data, "started") {
						go func() {
							dropped <- waitSleepers(s, 2)
							env.srv.DropConnections(true)
						}()
					}
					return nil
				})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-dropped; err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutcomeSandboxLost || res.ExitCode != -1 || res.Stdout != "started\n" || res.Detail == "" {
				t.Fatalf("%+v", res)
			}
			sleepers.WaitNone(t, s, 5*time.Second)
		})
	}
}

// The connection drops but the exec'd process is left running (its output
// pipe closed): the wrapper's next write fails and it kills the tree.
func TestEngineStreamLossBrokenPipeKillsTree(t *testing.T) {
	env := newEnv(t, ProtocolSPDY, nil)
	s := sleepers.Unique(t)
	dropped := make(chan error, 1)
	res, err := env.eng.Stream(t.Context(), Request{Namespace: "ns", Pod: "p", Shell: "sleep " + s + " & while :; do echo tick; sleep 0.05; done"},
		func(c Chunk) error {
			if c.Offset == 0 {
				go func() {
					dropped <- waitSleepers(s, 1)
					env.srv.DropConnections(false)
				}()
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeSandboxLost || !strings.HasPrefix(res.Stdout, "tick\n") {
		t.Fatalf("%+v", res)
	}
	sleepers.WaitNone(t, s, 5*time.Second)
}

// A stream that hangs (no trailer, no end) is cut at timeout + grace + margin.
func TestEngineClientDeadline(t *testing.T) {
	env := newEnv(t, ProtocolAuto, func(so *execserver.Options, eo *Options) {
		fakeWrapper(t, "exec sleep 30")(so, eo)
		eo.Grace, eo.DeadlineMargin = 100*time.Millisecond, 400*time.Millisecond
	})
	t.Cleanup(func() { env.srv.DropConnections(true) })
	start := time.Now()
	res := env.run(t, Request{Argv: []string{"true"}, Timeout: 500 * time.Millisecond})
	if res.Outcome != OutcomeSandboxLost || !strings.Contains(res.Detail, "deadline") {
		t.Fatalf("%+v", res)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Fatalf("deadline after %v", d)
	}
}

// The caller's own context ending is an error with the partial result.
func TestEngineCallerCancel(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	s := sleepers.Unique(t)
	ctx, cancel := contextWithCancel(t)
	res, err := env.eng.Stream(ctx, Request{Namespace: "ns", Pod: "p", Shell: "echo go; sleep " + s}, func(c Chunk) error {
		cancel()
		return nil
	})
	if err == nil || res == nil || res.Outcome != OutcomeSandboxLost || res.Stdout != "go\n" {
		t.Fatalf("res %+v err %v", res, err)
	}
	env.srv.DropConnections(true)
	sleepers.WaitNone(t, s, 5*time.Second)
}

// The exec URL (which the API server's audit log records) carries a fixed
// argv: the command, its env and the nonce travel on stdin.
func TestEngineCommandNotInURL(t *testing.T) {
	env := newEnv(t, ProtocolAuto, fakeWrapper(t, `echo "ARGS:$*"; head -c 9; echo; cat >/dev/null`))
	res := env.run(t, Request{Shell: "echo SECRET-COMMAND", Env: map[string]string{"TOKEN": "SECRET-ENV"}})
	if res.Stdout != "ARGS:exec\nAIRLOCK1 \n" {
		t.Fatalf("the wrapper was exec'd with %q", res.Stdout)
	}
	u, err := execURL(env.srv.RESTConfig(), &Request{Namespace: "ns", Pod: "p", Shell: "echo SECRET-COMMAND"}, []string{DefaultWrapperPath, "exec"})
	if err != nil || strings.Contains(u.String(), "SECRET") {
		t.Fatalf("%v %v", u, err)
	}
}
