package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"airlock.dev/airlock/internal/runwrap"
)

// controlTimeout bounds one exchange with the sandbox's supervisor (start a
// background process, list, read output, stdin, signal, kill).
const controlTimeout = 30 * time.Second

// ErrSupervisor wraps a request the sandbox's supervisor refused (unknown
// signal, stdin closed, too many background processes): the caller's fault,
// with the supervisor's message.
var ErrSupervisor = errors.New("refused by the sandbox's supervisor")

// StartBackground starts req's command as a background process in the
// sandbox and returns once it runs (or could not start: then the process's
// Trailer says why). Its output goes to files, read with Control(OpOutput);
// req.Timeout 0 means none; Stdin and the output budget do not apply.
func (e *Engine) StartBackground(ctx context.Context, req Request) (*runwrap.ProcInfo, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	wc := wrapperConfig(&req, id, req.Timeout, e.opts.Grace, e.opts.OutDir)
	wc.Background, wc.NoStdin = true, false
	rep, err := e.exchange(ctx, &req, &runwrap.Request{Op: runwrap.OpRun, Config: wc, ReserveReply: req.ReserveReply})
	if err != nil {
		return nil, err
	}
	if rep.Process == nil {
		return nil, fmt.Errorf("exec in %s/%s: the supervisor's reply names no process", req.Namespace, req.Pod)
	}
	p := rep.Process
	if rep.Done && rep.Trailer != nil {
		p.Trailer = rep.Trailer
	}
	return p, nil
}

// Control sends one request about known runs (runwrap.OpList, OpStatus,
// OpOutput, OpStdin, OpSignal, OpKill) to the supervisor of the sandbox
// container target names (Namespace, Pod, Container, SupervisorKey). A reply
// with Known false means no such run.
func (e *Engine) Control(ctx context.Context, target Request, creq runwrap.Request) (*runwrap.Reply, error) {
	if errs := target.targetErrors(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRequest, strings.Join(errs, "; "))
	}
	if creq.Op == runwrap.OpRun {
		return nil, fmt.Errorf("%w: start a background process with StartBackground", ErrInvalidRequest)
	}
	return e.exchange(ctx, &target, &creq)
}

// exchange makes one control call on target's session.
func (e *Engine) exchange(ctx context.Context, target *Request, creq *runwrap.Request) (*runwrap.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sess, release, err := e.sessions.acquire(ctx, target)
	if err != nil {
		return nil, err
	}
	rep, err := sess.Control(ctx, creq)
	release(err != nil && !sess.usable())
	if err != nil {
		return nil, fmt.Errorf("exec in %s/%s: no reply from the sandbox's supervisor: %w", target.Namespace, target.Pod, err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("%w: %s", ErrSupervisor, rep.Error)
	}
	return rep, nil
}

// limitedWriter keeps the first n bytes and discards the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
