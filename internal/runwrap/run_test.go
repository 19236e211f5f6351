package runwrap

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestExitCodesAndTrailer(t *testing.T) {
	for _, tc := range []struct {
		name, shell string
		code        int
		signal      string
		wrapperCode int
	}{
		{"zero", "echo out; echo err >&2", 0, "", 0},
		{"one", "exit 1", 1, "", 1},
		{"fortytwo", "echo x; exit 42", 42, "", 42},
		{"signal", "kill -TERM $$", -1, "SIGTERM", 128 + 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWrapper(t, nil, "--shell", tc.shell)
			if r.trailer == nil {
				t.Fatalf("no trailer; stderr %q", r.stderr)
			}
			if r.trailer.ExitCode != tc.code || r.trailer.Signal != tc.signal || r.trailer.TimedOut {
				t.Fatalf("trailer %+v, want code %d signal %q", r.trailer, tc.code, tc.signal)
			}
			if r.code != tc.wrapperCode {
				t.Fatalf("wrapper exit %d, want %d", r.code, tc.wrapperCode)
			}
			if r.trailer.V != TrailerVersion || r.trailer.StdoutBytes != int64(len(r.stdout)) || r.trailer.StderrBytes != int64(len(r.stderr)) {
				t.Fatalf("trailer %+v for stdout %q stderr %q", r.trailer, r.stdout, r.stderr)
			}
		})
	}
}

func TestOutputSeparatedAndKeptInFiles(t *testing.T) {
	r := runWrapper(t, nil, "--shell", "printf 'a\\nb'; printf 'E1\\nE2' >&2")
	if r.stdout != "a\nb" || r.stderr != "E1\nE2" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	for path, want := range map[string]string{r.trailer.StdoutPath: "a\nb", r.trailer.StderrPath: "E1\nE2"} {
		b, err := os.ReadFile(path)
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v; want %q", path, b, err, want)
		}
	}
}

func TestStdin(t *testing.T) {
	r := runWrapper(t, ptr("hello\nworld\n"), "--", "cat")
	if r.stdout != "hello\nworld\n" || r.trailer.ExitCode != 0 {
		t.Fatalf("cat with stdin: %q %+v", r.stdout, r.trailer)
	}
	// --no-stdin: EOF at once even though the caller's stdin stays open.
	pr, pw := io.Pipe()
	defer pw.Close()
	var out bytes.Buffer
	cfg := parseRun(t, "--no-stdin", "--", "cat")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := openSession(t, supervisorKey).Run(ctx, &cfg, pr, &out, io.Discard)
	if err != nil || out.String() != "" || rep.Trailer == nil || rep.Trailer.ExitCode != 0 {
		t.Fatalf("cat with --no-stdin: %+v, %v", rep, err)
	}
}

func TestCwdAndEnv(t *testing.T) {
	dir := t.TempDir()
	r := runWrapper(t, nil, "--cwd", dir, "--env", "A_VAR=x=y", "--env", "HOME=/nowhere", "--", "sh", "-c", `pwd; echo "$A_VAR $HOME"; env | grep -c AIRLOCK_RUNWRAP_ROLE`)
	want := dir + "\nx=y /nowhere\n0\n"
	if r.stdout != want {
		t.Fatalf("got %q want %q", r.stdout, want)
	}
}

// The wrapper's own descriptors (lifeline, ready pipe) must not leak into
// the command.
func TestNoLeakedDescriptors(t *testing.T) {
	r := runWrapper(t, nil, "--", "sh", "-c", "ls /proc/$$/fd")
	for _, fd := range strings.Fields(r.stdout) {
		if fd == "3" || fd == "4" {
			t.Fatalf("descriptor %s leaked into the command: %q", fd, r.stdout)
		}
	}
}

func TestStartFailures(t *testing.T) {
	r := runWrapper(t, nil, "--", "no-such-program-airlock")
	if r.trailer.ExitCode != 127 || !strings.Contains(r.trailer.StartError, "no-such-program-airlock") || !strings.Contains(r.stderr, "no-such-program-airlock") {
		t.Fatalf("not found: %+v %q", r.trailer, r.stderr)
	}
	r = runWrapper(t, nil, "--cwd", "/no/such/dir", "--", "true")
	if r.trailer.ExitCode == 0 || r.trailer.StartError == "" {
		t.Fatalf("bad cwd: %+v", r.trailer)
	}
	r = runWrapper(t, nil, "--", "/etc/passwd")
	if r.trailer.ExitCode != 126 {
		t.Fatalf("not executable: %+v", r.trailer)
	}
}

func TestNoShellInImage(t *testing.T) {
	old := shellPath
	shellPath = "/no/such/sh"
	defer func() { shellPath = old }()
	s := &supervisor{cfg: Config{Shell: "echo hi"}}
	_, err := s.command(nil, nil)
	if err == nil || !strings.Contains(err.Error(), "has no /no/such/sh") {
		t.Fatalf("err = %v", err)
	}
	if code, _ := startFailure(err); code != 127 {
		t.Fatalf("code %d", code)
	}
}

func TestBadRequestIsRefused(t *testing.T) {
	_, rep := runOn(t, openSession(t, supervisorKey), Config{ID: nextID(), Keep: 1}, nil) // no command
	if !strings.Contains(rep.Error, "no command") || rep.Trailer != nil {
		t.Fatalf("%+v", rep)
	}
}

func TestMaxOutput(t *testing.T) {
	r := runWrapper(t, nil, "--max-output", "100000", "--", "yes")
	tr := r.trailer
	if !tr.OutputLimit || tr.StdoutBytes != 100000 || len(r.stdout) != 100000 {
		t.Fatalf("trailer %+v, got %d bytes", tr, len(r.stdout))
	}
	if tr.ExitCode != -1 || tr.Signal == "" {
		t.Fatalf("yes should have been killed: %+v", tr)
	}
}
