package runwrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// streamOut is one of a run's output streams (a pipe to PID 1). It is made
// non-blocking so that writes can carry a deadline: a write that makes no
// progress for the stall timeout means nobody reads the stream any more.
type streamOut struct {
	f         *os.File // kept referenced: its finalizer would close the fd
	deadlines bool
	count     atomic.Int64 // bytes of the command's output captured
}

func newStreamOut(f *os.File, stdin *os.File) *streamOut {
	// A descriptor shared with stdin (a tty or socket) stays blocking: the
	// command reads stdin directly and must not see EAGAIN.
	var st0, st syscall.Stat_t
	shared := stdin != nil && syscall.Fstat(int(stdin.Fd()), &st0) == nil && syscall.Fstat(int(f.Fd()), &st) == nil &&
		st0.Dev == st.Dev && st0.Ino == st.Ino
	if shared {
		return &streamOut{f: f}
	}
	d := pollable(f, nil) // a non-blocking duplicate: writes can carry a deadline
	if d == f {
		return &streamOut{f: f}
	}
	_ = f.Close()
	return &streamOut{f: d, deadlines: true}
}

func (o *streamOut) write(b []byte, stall time.Duration) error {
	if o.deadlines && stall > 0 {
		// Fails harmlessly for files the poller cannot handle (regular files).
		_ = o.f.SetWriteDeadline(time.Now().Add(stall))
	}
	_, err := o.f.Write(b)
	return err
}

// copyBufSize matches the enlarged pipes: fewer, larger reads and writes.
const copyBufSize = 256 << 10

// growPipe asks for a 256 KiB pipe buffer instead of the default 64 KiB,
// which makes a flood cost fewer context switches. Best effort: it fails
// harmlessly on non-pipes or under a lower limit.
func growPipe(f *os.File) {
	if sc, err := f.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, copyBufSize) })
	}
}

// copy tees one output pipe of the command into its file and the stream,
// enforcing --max-output across both streams. It reads until EOF even after
// the stream is lost, so the command never blocks on a full pipe.
func (s *supervisor) copy(wg *sync.WaitGroup, src, file *os.File, dst *streamOut) {
	defer wg.Done()
	buf := make([]byte, copyBufSize)
	for {
		n, err := src.Read(buf)
		data := buf[:n]
		if limit := s.cfg.KillAfterOutputBytes; limit > 0 && n > 0 {
			if over := s.total.Add(int64(n)) - limit; over > 0 {
				data = data[:max(0, int64(n)-over)]
				if s.outputLimit.CompareAndSwap(false, true) {
					s.requestKill()
				}
			}
		}
		if len(data) > 0 {
			dst.count.Add(int64(len(data)))
			if file != nil {
				if _, werr := file.Write(data); werr != nil {
					s.setFileErr(fmt.Errorf("write %s: %w", file.Name(), werr))
					file = nil
				}
			}
			if !s.streamLost.Load() {
				if werr := dst.write(data, s.cfg.StallTimeout); werr != nil {
					s.streamLost.Store(true)
					s.requestKill()
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// command builds the user's command: own session (so its group can be
// signalled as a whole), the given cwd and env, stdin passed straight through.
func (s *supervisor) command(outW, errW *os.File) (*launch, error) {
	argv := s.cfg.command()
	if s.cfg.Shell != "" {
		argv[0] = shellPath
		if _, err := os.Stat(shellPath); err != nil {
			return nil, fmt.Errorf("this image has no %s; pass the command as an argv instead: %w", shellPath, exec.ErrNotFound)
		}
	}
	env := dedupEnv(append(os.Environ(), s.cfg.Env...))
	path, err := lookPath(argv[0], lastEnv(env, "PATH"))
	if err != nil {
		return nil, err
	}
	l := &launch{path: path, argv: argv, env: env, dir: s.cfg.Cwd, stdout: outW, stderr: errW,
		limited: os.Getenv(ProcessLimitEnv) != ""}
	if l.limited {
		// Checked here, since the trampoline and the starter can only report
		// what execve says.
		if err := checkExecutable(path); err != nil {
			return nil, err
		}
	}
	if !s.cfg.NoStdin {
		l.stdin = s.stdin
	}
	return l, nil
}

// dedupEnv keeps the last value of each variable, in place of its first, as
// os/exec does: an execve of our own must not pass duplicates.
func dedupEnv(env []string) []string {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	out := make([]string, 0, len(last))
	seen := make(map[string]bool, len(last))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !seen[k] {
			seen[k] = true
			out = append(out, env[last[k]])
		}
	}
	return out
}

// checkExecutable reports what exec would: ENOENT or EACCES.
func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("exec %s: %w", path, os.ErrPermission)
	}
	return nil
}

// shellPath is ShellPath; a variable so tests can point it elsewhere.
var shellPath = ShellPath

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath resolves name against the command's PATH (not ours, which
// exec.LookPath would use).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil // may be relative to --cwd: Start reports errors
	}
	if path == "" {
		path = defaultPath
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func lastEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// startFailure maps a start error to a shell-like exit code and message. The message quotes the program, which
// may be as long as the request: it is cut, since every later process list of the sandbox carries it.
func startFailure(err error) (int, string) {
	msg := err.Error()
	if len(msg) > maxStartError {
		msg = msg[:maxStartError] + fmt.Sprintf("… (%d bytes cut)", len(msg)-maxStartError)
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "chdir") {
		return 127, msg
	}
	return 126, msg
}

// maxStartError bounds a start failure's message.
const maxStartError = 1 << 10
