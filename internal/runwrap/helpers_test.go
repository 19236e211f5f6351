package runwrap

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/testutil/child"
	"airlock.dev/airlock/internal/testutil/sleepers"
)

// wrapperBin is the airlock-init stand-in built once for the package; its
// pid1 (the supervisor) runs for the whole package on socketName.
var wrapperBin, socketName string

var idSeq atomic.Int64

func nextID() string { return fmt.Sprintf("test-run-%016d", idSeq.Add(1)) }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runwrap-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wrapperBin = filepath.Join(dir, "airlock-init")
	build := exec.Command("go", "build", "-o", wrapperBin, "./testbin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build wrapper: %v\n%s", err, out)
		os.Exit(1)
	}
	socketName = fmt.Sprintf("@airlock-runwrap-test-%d", os.Getpid())
	os.Setenv(SocketEnv, socketName)
	// The host's memory is not the tests' to guard (TestMemoryGuardKillsLargest runs its own pid1).
	os.Setenv(MemoryGuardEnv, "off")
	pid1, key, err := startPID1Env(wrapperBin, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	supervisorKey, pid1PID = key, pid1.Process.Pid
	code := m.Run()
	_ = pid1.Process.Kill()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// supervisorKey is the package's PID 1's attested key; pid1PID its process.
var (
	supervisorKey ed25519.PublicKey
	pid1PID       int
)

// startPID1Env starts `bin pid1` with env added to ours and a network gate whose target is a closed port on
// loopback (refused), and returns it with the key it attested; its log goes on to stderr.
func startPID1Env(bin string, env []string) (*exec.Cmd, ed25519.PublicKey, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd, keys, err := launchPID1(bin, env, "pid1", "--gate-host=127.0.0.1", "--gate-port="+strconv.Itoa(port), "--gate-timeout=5s")
	if err != nil {
		return nil, nil, err
	}
	select {
	case k, ok := <-keys:
		if !ok {
			_ = cmd.Wait()
			return nil, nil, fmt.Errorf("%s ended without attesting", bin)
		}
		return cmd, k, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("%s did not attest within 30s", bin)
	}
}

// launchPID1 starts `bin args...` with env added to ours; the channel gets the key it attests (and is closed
// when its log ends). Its log goes on to stderr.
func launchPID1(bin string, env []string, args ...string) (*exec.Cmd, <-chan ed25519.PublicKey, error) {
	cmd := child.DieWithParent(exec.Command(bin, args...))
	cmd.Env = append(os.Environ(), env...)
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logW
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	_ = logW.Close()
	keys := make(chan ed25519.PublicKey, 1)
	go func() {
		defer close(keys)
		sc := bufio.NewScanner(logR)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, sc.Text())
			if st, err := attestation.Find(append(sc.Bytes(), '\n')); err == nil {
				if pub, err := pid1link.ParsePublicKey(st.Key); err == nil {
					select {
					case keys <- pub:
					default:
					}
				}
			}
		}
	}()
	return cmd, keys, nil
}

type runResult struct {
	stdout, stderr string
	trailer        *Trailer
	code           int
	elapsed        time.Duration
}

// testSession is a session as the gateway opens one: `airlock-init connect` exec'd with pipes for stdin and
// stdout, TLS and HTTP/2 over them.
type testSession struct {
	*SessionClient
	client *exec.Cmd
	conn   net.Conn
}

// openSession opens a session with the PID 1 whose attested key is key (the package's: supervisorKey).
func openSession(t testing.TB, key ed25519.PublicKey) *testSession {
	t.Helper()
	return openSessionEnv(t, nil, key)
}

// openSessionEnv is openSession with env added to the client's (e.g. another PID 1's socket).
func openSessionEnv(t testing.TB, env []string, key ed25519.PublicKey) *testSession {
	t.Helper()
	cmd := child.DieWithParent(exec.Command(wrapperBin, "connect"))
	cmd.Env = append(os.Environ(), env...)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = inR.Close()
	_ = outW.Close()
	conn := pid1link.FileConn(outR, inW)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, err := pid1link.Dial(ctx, conn, key)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("session: %v", err)
	}
	s := &testSession{SessionClient: NewSessionClient(cc), client: cmd, conn: conn}
	t.Cleanup(s.close)
	return s
}

// close ends the session; the client exits once PID 1 let go of the stream.
func (s *testSession) close() {
	_ = s.SessionClient.Close()
	done := make(chan struct{})
	go func() { _ = s.client.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.client.Process.Kill()
		<-done
	}
}

// parseRun is the Config that the old run flags describe (ParseArgs), with its outputs under a temp dir.
func parseRun(t testing.TB, args ...string) Config {
	t.Helper()
	cfg, err := ParseArgs(append([]string{"--out-dir", filepath.Join(t.TempDir(), "out")}, args...))
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	return cfg
}

// runWrapper runs the command the flags describe to completion on a fresh session.
func runWrapper(t *testing.T, stdin *string, args ...string) runResult {
	t.Helper()
	return runConfig(t, parseRun(t, args...), stdin)
}

// runConfig runs cfg to completion on a fresh session; a refused request is a test failure.
func runConfig(t *testing.T, cfg Config, stdin *string) runResult {
	t.Helper()
	res, rep := runOn(t, openSession(t, supervisorKey), cfg, stdin)
	if rep.Error != "" {
		t.Fatalf("run refused: %s", rep.Error)
	}
	return res
}

// runOn runs cfg on sess and returns what came back.
func runOn(t *testing.T, sess *testSession, cfg Config, stdin *string) (runResult, *Reply) {
	t.Helper()
	var out, errb bytes.Buffer
	var in io.Reader
	if stdin != nil {
		in = strings.NewReader(*stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := sess.Run(ctx, &cfg, in, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return runResult{stdout: out.String(), stderr: errb.String(), trailer: rep.Trailer, code: rep.Code, elapsed: time.Since(start)}, rep
}

// ctl makes one control call on a fresh session and returns PID 1's reply.
func ctl(t testing.TB, req *Request) Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := openSession(t, supervisorKey).Control(ctx, req)
	if err != nil {
		t.Fatalf("control %s: %v", req.Op, err)
	}
	return *rep
}

// statusOf asks the supervisor for a run's outcome, as the engine does after a lost answer.
func statusOf(t testing.TB, req Request) Reply {
	t.Helper()
	req.Op = OpStatus
	return ctl(t, &req)
}

// asyncRun is a run in progress on its own session.
type asyncRun struct {
	sess   *testSession
	cfg    Config
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan struct{}
	rep    *Reply
	err    error
}

// startRun starts the command the flags describe on a fresh session and waits until n `sleep s` run.
func startRun(t *testing.T, s string, n int, args ...string) *asyncRun {
	t.Helper()
	r := startConfig(t, parseRun(t, args...), nil)
	sleepers.WaitCount(t, s, n)
	return r
}

// startConfig starts cfg on a fresh session; out, if set, receives stdout instead of the run's buffer.
func startConfig(t *testing.T, cfg Config, out io.Writer) *asyncRun {
	t.Helper()
	return startOn(t, openSession(t, supervisorKey), cfg, out)
}

// startOn starts cfg on sess; out, if set, receives stdout instead of the run's buffer.
func startOn(t *testing.T, sess *testSession, cfg Config, out io.Writer) *asyncRun {
	t.Helper()
	r := &asyncRun{sess: sess, cfg: cfg, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	if out == nil {
		out = r.stdout
	}
	go func() {
		defer close(r.done)
		r.rep, r.err = r.sess.Run(context.Background(), &r.cfg, nil, out, r.stderr)
	}()
	return r
}

// wait waits up to d for the run's answer.
func (r *asyncRun) wait(t *testing.T, d time.Duration) (*Reply, error) {
	t.Helper()
	select {
	case <-r.done:
		return r.rep, r.err
	case <-time.After(d):
		t.Fatalf("no answer within %v", d)
		return nil, nil
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func ptr(s string) *string { return &s }

type envFlag struct{ vals *[]string }

func (e envFlag) String() string { return "" }
func (e envFlag) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || k == "" || strings.ContainsRune(v, 0) {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*e.vals = append(*e.vals, v)
	return nil
}

// ParseArgs parses the flags of the former `airlock-init run`, which the
// tests keep as a compact way to write a Config:
//
//	[--timeout D] [--grace D] [--stall-timeout D] [--cwd DIR]
//	[--env K=V]... [--no-stdin] [--out-dir DIR] [--keep N] [--max-output BYTES]
//	[--keep-leftovers] (--shell STRING | -- ARGV...)
func ParseArgs(args []string) (Config, error) {
	c := Config{ID: nextID(), Grace: DefaultGrace, Keep: DefaultKeep, StallTimeout: DefaultStallTimeout}
	fs := flag.NewFlagSet("airlock-init run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.DurationVar(&c.Timeout, "timeout", 0, "kill the command tree after this long (0: never)")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "SIGTERM to SIGKILL delay")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", c.StallTimeout, "a write to the stream blocked this long means the stream is lost")
	fs.StringVar(&c.Cwd, "cwd", "", "working directory")
	fs.Var(envFlag{&c.Env}, "env", "KEY=VALUE added to the environment (repeatable)")
	fs.StringVar(&c.Shell, "shell", "", "run this string with "+ShellPath+" -c")
	fs.BoolVar(&c.NoStdin, "no-stdin", false, "give the command /dev/null as stdin")
	fs.StringVar(&c.OutDir, "out-dir", "", "where full outputs are kept (default $HOME/.airlock/out)")
	fs.IntVar(&c.Keep, "keep", c.Keep, "how many past outputs to keep")
	fs.Int64Var(&c.KillAfterOutputBytes, "max-output", 0, "kill the command once stdout+stderr exceed this many bytes (0: no limit)")
	fs.BoolVar(&c.KeepLeftovers, "keep-leftovers", false, "do not kill processes left behind by a command that exited on its own")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	c.Argv = fs.Args()
	return c, c.validate()
}
