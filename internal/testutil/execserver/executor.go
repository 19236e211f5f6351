package execserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	crs "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"airlock.dev/airlock/internal/testutil/child"
)

// executor runs exec'd commands as local processes, the way a container
// runtime would: stdin copied in until the client closes it or the process
// exits, stdout and stderr copied out until every writer is gone or a moment
// after the process exited, and exit codes reported as the runtime does
// (128+N for a signal).
type executor Server

// outputAfterExit is how long output is still copied once the exec'd process exited.
const outputAfterExit = 200 * time.Millisecond

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
	// Our own pipes, so that the exec ends with its process, as a runtime's does (containerd closes the
	// process's stdin and stops copying its output soon after it exited, whoever else holds the pipes).
	var writeEnds, readEnds []*os.File // ours: the process has its own copies of the write ends
	var copies sync.WaitGroup
	for _, o := range []struct {
		w   io.WriteCloser
		dst **os.File
	}{{out, nil}, {errw, nil}} {
		if o.w == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("output pipe: %w", err)
		}
		if o.w == out {
			c.Stdout = w
		} else {
			c.Stderr = w
		}
		writeEnds, readEnds = append(writeEnds, w), append(readEnds, r)
		copies.Add(1)
		go func() { defer copies.Done(); _, _ = io.Copy(o.w, r) }()
	}
	var stdinW *os.File
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("stdin pipe: %w", err)
		}
		c.Stdin, stdinW = r, w
		readEnds = append(readEnds, r)
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	if err := c.Start(); err != nil {
		closeAll(append(writeEnds, readEnds...))
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
	// The process is gone: its stdin is closed, and its output copied for a moment more, then cut.
	if stdinW != nil {
		_ = stdinW.Close()
	}
	closeAll(writeEnds)
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(outputAfterExit):
	}
	closeAll(readEnds)

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
