package runwrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// A starter is the command's process started ahead of the run, under the process limit: a keeper (itself
// started ahead by PID 1) starts one at once, so that when the run comes only an execve remains, not a Go
// process start (~13 ms under gVisor) plus the execve. It runs in its own session, undumpable until its
// execve, and becomes the command when it receives the program, argv, env, cwd and stdio on its socket.

const roleStarter = "starter"

type starter struct {
	proc *os.Process
	ctl  *net.UnixConn
}

// starterRequest is what a starter execs.
type starterRequest struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
}

// starterFailure is a starter's answer when it could not exec; success is the socket closing at execve.
type starterFailure struct {
	Error    string `json:"error"`
	NotFound bool   `json:"not_found,omitempty"`
}

// startStarter starts a starter when a process limit applies (else nil): best effort, a run without one
// starts its command through the limit trampoline.
func startStarter() *starter {
	if os.Getenv(ProcessLimitEnv) == "" {
		return nil
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	mine, theirs := os.NewFile(uintptr(sp[0]), "starter-control"), os.NewFile(uintptr(sp[1]), "control")
	defer theirs.Close()
	fc, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		return nil
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		_ = fc.Close()
		return nil
	}
	defer null.Close()
	p, err := os.StartProcess("/proc/self/exe", []string{"airlock-init-starter"}, &os.ProcAttr{
		Env:   append(os.Environ(), roleEnv+"="+roleStarter),
		Files: []*os.File{null, null, null, theirs},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		_ = fc.Close()
		return nil
	}
	return &starter{proc: p, ctl: fc.(*net.UnixConn)}
}

// alive reports whether the starter still waits (a command may have killed it).
func (st *starter) alive() bool {
	info, ok := readStat(st.proc.Pid)
	return ok && info.state != 'Z' && info.state != 'X'
}

// discard ends an unused starter.
func (st *starter) discard() {
	_ = st.ctl.Close() // it sees EOF and exits
	_, _ = st.proc.Wait()
}

// exec makes the starter the command: it returns once the starter exec'd (its socket closed) or failed.
// A starter killed between alive and its execve also closes the socket: the run then reports a command
// killed by that signal, truthfully, and nothing of it ran; only a process of the sandbox can do that.
func (st *starter) exec(req starterRequest, stdin, stdout, stderr *os.File) error {
	files := []*os.File{stdout, stderr}
	if stdin != nil {
		files = append(files, stdin)
	}
	if err := sendFrameFiles(st.ctl, &req, files); err != nil {
		return fmt.Errorf("hand the command to its starter: %w", err)
	}
	var f starterFailure
	err := ReadFrame(st.ctl, &f)
	_ = st.ctl.Close()
	if err != nil || f.Error == "" {
		return nil // EOF: the close-on-exec socket closed at execve
	}
	_, _ = st.proc.Wait()
	if f.NotFound {
		return fmt.Errorf("%s: %w", f.Error, os.ErrNotExist)
	}
	return errors.New(f.Error)
}

// starterMain is the starter's side: apply the process limit, wait for the command, become it.
func starterMain() int {
	_ = os.Unsetenv(roleEnv)
	// Nothing to hide yet, but the next command's env is: no same-uid process may read or ptrace us until
	// execve (which makes the command dumpable again).
	_ = setNotDumpable()
	if err := applyProcessLimit(); err != nil {
		return 126 // the keeper sees EOF before it sent anything and uses the trampoline
	}
	syscall.CloseOnExec(fdControl)
	fc, err := net.FileConn(os.NewFile(fdControl, "control"))
	if err != nil {
		return 126
	}
	ctl := fc.(*net.UnixConn)
	var req starterRequest
	files, err := recvFrameFiles(ctl, &req, 3)
	if err != nil || len(files) < 2 {
		return 0 // not needed after all
	}
	fail := func(code int, err error) int {
		_ = WriteFrame(ctl, &starterFailure{Error: err.Error(), NotFound: code == 127})
		return code
	}
	if len(files) < 3 {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fail(126, fmt.Errorf("open %s: %w", os.DevNull, err))
		}
		files = append(files, null)
	}
	for i, target := range []int{1, 2, 0} {
		if err := syscall.Dup3(int(files[i].Fd()), target, 0); err != nil {
			return fail(126, fmt.Errorf("dup stdio: %w", err))
		}
	}
	if req.Dir != "" {
		if err := syscall.Chdir(req.Dir); err != nil {
			return fail(126, fmt.Errorf("chdir %s: %w", req.Dir, err))
		}
	}
	err = syscall.Exec(req.Path, req.Argv, req.Env)
	if errors.Is(err, syscall.ENOENT) {
		return fail(127, fmt.Errorf("exec %s: %w", req.Path, err))
	}
	return fail(126, fmt.Errorf("exec %s: %w", req.Path, err))
}

// process is a started command: its pid (and process group) and how to wait for it.
type process struct {
	pid  int
	wait func() (*os.ProcessState, error)
}

// start starts l: through the keeper's starter when one waits, else as a child of ours (through the limit
// trampoline when a process limit applies).
func (s *supervisor) start(l *launch) (process, error) {
	if l.limited && s.starter != nil {
		st := s.starter
		s.starter = nil
		if st.alive() {
			err := st.exec(starterRequest{Path: l.path, Argv: l.argv, Env: l.env, Dir: l.dir}, l.stdin, l.stdout, l.stderr)
			if err != nil {
				return process{}, err
			}
			return process{pid: st.proc.Pid, wait: st.proc.Wait}, nil
		}
		st.discard()
	}
	cmd := l.cmd()
	if err := cmd.Start(); err != nil {
		return process{}, err
	}
	return process{pid: cmd.Process.Pid, wait: func() (*os.ProcessState, error) {
		err := cmd.Wait()
		return cmd.ProcessState, err
	}}, nil
}

// launch is the command as the keeper starts it.
type launch struct {
	path, dir             string
	argv, env             []string
	stdin, stdout, stderr *os.File // stdin nil: /dev/null
	limited               bool     // RLIMIT_NPROC applies to the command alone
}

// cmd is l as a child of ours; with the process limit, through the trampoline that sets it.
func (l *launch) cmd() *exec.Cmd {
	cmd := &exec.Cmd{Path: l.path, Args: l.argv, Env: l.env, Dir: l.dir, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if l.limited {
		cmd.Env = append(append([]string(nil), l.env...), roleEnv+"="+roleLimit, execPathEnv+"="+l.path)
		cmd.Path = "/proc/self/exe"
	}
	if l.stdin != nil {
		cmd.Stdin = l.stdin
	}
	cmd.Stdout, cmd.Stderr = l.stdout, l.stderr
	return cmd
}
