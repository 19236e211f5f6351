package runwrap

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
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
	pid1 := child.DieWithParent(exec.Command(wrapperBin, "pid1"))
	pid1.Stderr = os.Stderr
	if err := pid1.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = pid1.Process.Kill()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const testNonce = "test-nonce-0123456789abcdef"

type runResult struct {
	stdout, stderr string // stderr without the trailer
	trailer        *Trailer
	code           int
	elapsed        time.Duration
}

// wrapperCmd prepares `airlock-init exec` for the Config that the old run
// flags --nonce N --out-dir D ARGS... describe; its stdin starts with the
// request frame (runCmd adds the test's stdin after it).
func wrapperCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return wrapperCmdDir(t, filepath.Join(t.TempDir(), "out"), args...)
}

func wrapperCmdDir(t *testing.T, outDir string, args ...string) *exec.Cmd {
	t.Helper()
	cfg, err := ParseArgs(append([]string{"--nonce", testNonce, "--out-dir", outDir}, args...))
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	return execCmd(t, cfg)
}

func execCmd(t *testing.T, cfg Config) *exec.Cmd {
	t.Helper()
	var frame bytes.Buffer
	if err := WriteFrame(&frame, &cfg); err != nil {
		t.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(wrapperBin, "exec"))
	cmd.Stdin = &frame
	return cmd
}

// runWrapper runs the wrapper to completion and splits off the trailer.
func runWrapper(t *testing.T, stdin *string, args ...string) runResult {
	t.Helper()
	return runCmd(t, wrapperCmd(t, args...), stdin)
}

func runCmd(t *testing.T, cmd *exec.Cmd, stdin *string) runResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = io.MultiReader(cmd.Stdin, strings.NewReader(*stdin))
	}
	start := time.Now()
	err := cmd.Run()
	res := runResult{stdout: out.String(), elapsed: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run wrapper: %v", err)
	}
	res.stderr, res.trailer = splitTrailer(t, errb.String())
	return res
}

func splitTrailer(t *testing.T, s string) (string, *Trailer) {
	t.Helper()
	i := strings.LastIndex(s, "\n"+testNonce+" ")
	if i < 0 || !strings.HasSuffix(s, "\n") {
		return s, nil
	}
	var tr Trailer
	if err := json.Unmarshal([]byte(s[i+len(testNonce)+2:len(s)-1]), &tr); err != nil {
		t.Fatalf("bad trailer %q: %v", s[i:], err)
	}
	return s[:i], &tr
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
//	--nonce N [--timeout D] [--grace D] [--stall-timeout D] [--cwd DIR]
//	[--env K=V]... [--no-stdin] [--out-dir DIR] [--keep N] [--max-output BYTES]
//	[--keep-leftovers] (--shell STRING | -- ARGV...)
//
// On error the returned Config still carries the nonce when one was parsed,
// so a trailer can report the usage error.
func ParseArgs(args []string) (Config, error) {
	c := Config{ID: nextID(), Grace: DefaultGrace, Keep: DefaultKeep, StallTimeout: DefaultStallTimeout}
	fs := flag.NewFlagSet("airlock-init run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Nonce, "nonce", "", "trailer nonce")
	fs.DurationVar(&c.Timeout, "timeout", 0, "kill the command tree after this long (0: never)")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "SIGTERM to SIGKILL delay")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", c.StallTimeout, "a write to the stream blocked this long means the stream is lost")
	fs.StringVar(&c.Cwd, "cwd", "", "working directory")
	fs.Var(envFlag{&c.Env}, "env", "KEY=VALUE added to the environment (repeatable)")
	fs.StringVar(&c.Shell, "shell", "", "run this string with "+ShellPath+" -c")
	fs.BoolVar(&c.NoStdin, "no-stdin", false, "give the command /dev/null as stdin")
	fs.StringVar(&c.OutDir, "out-dir", "", "where full outputs are kept (default $HOME/.airlock/out)")
	fs.IntVar(&c.Keep, "keep", c.Keep, "how many past outputs to keep")
	fs.Int64Var(&c.MaxOutput, "max-output", 0, "kill the command once stdout+stderr exceed this many bytes (0: no limit)")
	fs.BoolVar(&c.KeepLeftovers, "keep-leftovers", false, "do not kill processes left behind by a command that exited on its own")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	c.Argv = fs.Args()
	return c, c.validate()
}
