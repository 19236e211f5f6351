package podexec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"airlock.dev/airlock/internal/pid1link"

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

// A process that holds the exec stream (a command that opened the client's
// /proc/PID/fd/0 and 1 before it made itself undumpable) may answer on it
// whatever it likes, speaking the session protocol perfectly: without the
// attested key its answer never becomes an outcome. Fails with the key pin
// taken out of pid1link.ClientTLS, and with TLS taken out of the session
// (each checked once: "forged" then came back as the command's exit 0).
func TestEngineForgedAnswerIsNoOutcome(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, fakeWrapper(t, "exec "+wrapperBin+" forge"))
			res, err := env.eng.Run(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p", Argv: []string{"true"}}))
			if res != nil || !errors.Is(err, ErrNotStarted) || !errors.Is(err, pid1link.ErrWrongKey) {
				t.Fatalf("a forged answer was taken: %+v, %v", res, err)
			}
		})
	}
}

// A session broken before its handshake (a process that wrote into the stream of a client it reached) costs
// that session only: the engine opens another, and the command's own result comes back.
func TestEngineRetriesABrokenHandshake(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken-once")
	env := newEnv(t, ProtocolAuto, fakeWrapper(t, `if [ ! -e `+broken+` ]; then touch `+broken+`; printf 'FORGED'; exit 0; fi; exec `+wrapperBin+` "$@"`))
	res := env.run(t, Request{Shell: "echo real; exit 4"})
	if res.Outcome != OutcomeExited || res.ExitCode != 4 || res.Stdout != "real\n" {
		t.Fatalf("%+v", res)
	}
	if _, err := os.Stat(broken); err != nil {
		t.Fatal("the first session was not the broken one")
	}
}

// The engine talks only to the holder of the key the Sandbox's status records:
// another PID 1 (another key) gets no command.
func TestEngineRefusesAnotherKey(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	made := filepath.Join(env.home, "ran")
	res, err := env.eng.Run(t.Context(), Request{Namespace: "ns", Pod: "p", SupervisorKey: someKey, Shell: "touch " + made})
	if res != nil || !errors.Is(err, ErrNotStarted) || !errors.Is(err, pid1link.ErrWrongKey) {
		t.Fatalf("want ErrWrongKey, got %+v, %v", res, err)
	}
	if _, err := os.Stat(made); err == nil {
		t.Fatal("the command ran for a session with the wrong key")
	}
	if _, err := env.eng.Run(t.Context(), Request{Namespace: "ns", Pod: "p", Argv: []string{"true"}}); !errors.Is(err, ErrNoSupervisorKey) {
		t.Fatalf("without a key: %v", err)
	}
}

// The connection drops (an API-server or kubelet restart), with or without the runtime killing the exec'd
// client (as containerd does): the run goes on in the sandbox, the engine follows it on a new session, and the
// caller gets the command's real outcome and all of its output. Fails with the engine not re-attaching
// (checked once: sandbox_lost, the command killed).
func TestEngineReattachesAfterStreamLoss(t *testing.T) {
	for _, p := range protocols {
		for _, kill := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/kill-exec-%t", p, kill), func(t *testing.T) {
				env := newEnv(t, p, nil)
				var once sync.Once
				res, err := env.eng.Stream(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p",
					Shell: "for i in $(seq 1 20); do echo line $i; sleep 0.05; done; exit 3"}),
					func(c Chunk) error {
						if strings.Contains(c.Data, "line 3") {
							once.Do(func() { go env.srv.DropConnections(kill) })
						}
						return nil
					})
				if err != nil {
					t.Fatal(err)
				}
				var want strings.Builder
				for i := 1; i <= 20; i++ {
					fmt.Fprintf(&want, "line %d\n", i)
				}
				if res.Outcome != OutcomeExited || res.ExitCode != 3 || res.Stdout != want.String() || res.OutputIncomplete {
					t.Fatalf("%+v", res)
				}
			})
		}
	}
}

// A sandbox that stops answering (its PID 1 frozen) is cut at timeout + grace
// + margin: sandbox_lost, never a hang.
func TestEngineClientDeadline(t *testing.T) {
	env := newEnv(t, ProtocolAuto, func(_ *execserver.Options, eo *Options) {
		eo.Grace, eo.DeadlineMargin = 100*time.Millisecond, 400*time.Millisecond
	})
	pid1 := env.srv.SupervisorPID()
	t.Cleanup(func() { _ = syscall.Kill(pid1, syscall.SIGCONT) })
	start := time.Now()
	res, err := env.eng.Stream(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p", Shell: "echo go; sleep 5", Timeout: 500 * time.Millisecond}),
		func(c Chunk) error { return syscall.Kill(pid1, syscall.SIGSTOP) })
	if err != nil || res.Outcome != OutcomeSandboxLost || !strings.Contains(res.Detail, "deadline") {
		t.Fatalf("%+v, %v", res, err)
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
	res, err := env.eng.Stream(ctx, env.keyed(Request{Namespace: "ns", Pod: "p", Shell: "echo go; sleep " + s}), func(c Chunk) error {
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
// argv, and the exec stream carries only ciphertext: the command, its env and
// its output are readable neither in the URL nor by a process that taps the
// stream in the sandbox (here a tee on each side of the client). Fails with
// the session's TLS taken out of pid1link (checked once).
func TestEngineRequestOnlyInsideTheSession(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	env := newEnv(t, ProtocolAuto, fakeWrapper(t, `[ "$*" = connect ] || exit 2; tee `+in+` | `+wrapperBin+` connect | tee `+out))
	res := env.run(t, Request{Shell: "echo SECRET-COMMAND-OUTPUT; echo $TOKEN", Env: map[string]string{"TOKEN": "SECRET-ENV"}})
	if res.Outcome != OutcomeExited || res.Stdout != "SECRET-COMMAND-OUTPUT\nSECRET-ENV\n" {
		t.Fatalf("the tapped session did not work: %+v", res)
	}
	for _, f := range []string{in, out} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) < 100 {
			t.Fatalf("tap %s: %d bytes, %v", f, len(b), err)
		}
		if bytes.Contains(b, []byte("SECRET")) {
			t.Fatalf("the stream carried plaintext (%s): %q", f, b)
		}
	}
	u, err := execURL(env.srv.RESTConfig(), &Request{Namespace: "ns", Pod: "p", Shell: "echo SECRET-COMMAND"}, []string{DefaultWrapperPath, "connect"})
	if err != nil || strings.Contains(u.String(), "SECRET") {
		t.Fatalf("%v %v", u, err)
	}
}

// The exec'd client killed mid-run (a command's kill -9 -1 reaches it: same uid), before the run printed
// anything: the session's stream ends with it, and the engine follows the run on a new session. Fails with a
// break before the answer's first frame not followed (checked once: sandbox_lost, the run cancelled).
func TestEngineClientKilledBeforeOutput(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	go func() {
		time.Sleep(500 * time.Millisecond)
		for _, pid := range env.srv.ExecPIDs() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	res := env.run(t, Request{Shell: "sleep 1.5; echo done; exit 5"})
	if res.Outcome != OutcomeExited || res.ExitCode != 5 || res.Stdout != "done\n" {
		t.Fatalf("%+v", res)
	}
}
