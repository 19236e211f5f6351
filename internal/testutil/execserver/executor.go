package execserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	crs "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"airlock.dev/airlock/internal/testutil/child"
)

// executor runs exec'd commands as local processes, the way a container
// runtime would: stdin copied in until the client closes it, stdout and
// stderr copied out until every writer is gone, and exit codes reported as
// the runtime does (128+N for a signal).
type executor Server

var _ crs.Executor = (*executor)(nil)

func (e *executor) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan crs.TerminalSize, timeout time.Duration) error {
	s := (*Server)(e)
	if len(cmd) == 0 {
		return errNoCommand
	}
	argv := append([]string(nil), cmd...)
	if p, ok := s.opts.Rewrite[argv[0]]; ok {
		argv[0] = p
	}
	c := child.DieWithParent(exec.Command(argv[0], argv[1:]...))
	c.Env = append(os.Environ(), s.opts.Env...)
	c.Dir = s.opts.Dir
	if out != nil {
		c.Stdout = out
	}
	if errw != nil {
		c.Stderr = errw
	}
	// stdin through our own pipe: os/exec would wait for its copier, and a
	// runtime does not wait for the client's stdin to end.
	var stdinW *os.File
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("stdin pipe: %w", err)
		}
		c.Stdin, stdinW = r, w
		defer r.Close()
	}
	if err := c.Start(); err != nil {
		if stdinW != nil {
			_ = stdinW.Close()
		}
		// The kubelet's words when the runtime cannot start the process.
		return fmt.Errorf("failed to exec in container: start %q: %w", argv[0], err)
	}
	if stdinW != nil {
		go func() {
			_, _ = io.Copy(stdinW, in)
			_ = stdinW.Close()
		}()
	}
	s.mu.Lock()
	s.procs[c.Process.Pid] = c.Process
	s.mu.Unlock()
	err := c.Wait()
	s.mu.Lock()
	delete(s.procs, c.Process.Pid)
	s.mu.Unlock()

	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}
