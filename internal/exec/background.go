package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/tools/remotecommand"

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
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	id, err := newNonce()
	if err != nil {
		return nil, err
	}
	wc := wrapperConfig(&req, id, nonce, req.Timeout, e.opts.Grace, e.opts.OutDir)
	wc.Background, wc.NoStdin = true, false
	rep, err := e.exchange(ctx, &req, "exec", &wc)
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
// container target names (Namespace, Pod, Container). A reply with Known
// false means no such run.
func (e *Engine) Control(ctx context.Context, target Request, creq runwrap.Request) (*runwrap.Reply, error) {
	if errs := target.targetErrors(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRequest, strings.Join(errs, "; "))
	}
	return e.exchange(ctx, &target, "ctl", &creq)
}

// exchange runs `airlock-init <sub>` with frame on its stdin and reads the
// supervisor's reply from its stdout.
func (e *Engine) exchange(ctx context.Context, target *Request, sub string, frame any) (*runwrap.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	stdin, err := framedStdin(frame, nil)
	if err != nil {
		return nil, err
	}
	u, err := execURL(e.cfg, target, []string{e.opts.WrapperPath, sub})
	if err != nil {
		return nil, err
	}
	var at attempt
	ex, err := newExecutor(e.cfg, e.opts.Protocol, u, &at)
	if err != nil {
		return nil, err
	}
	out := &limitedBuffer{max: 4 << 20} // an output reply holds up to 1 MiB per stream, base64
	var stderr bytes.Buffer
	streamErr := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: out, Stderr: &limitedWriter{w: &stderr, n: 4 << 10}})
	var rep runwrap.Reply
	if err := runwrap.ReadFrame(&out.buf, &rep); err != nil {
		if out.buf.Len() == 0 && notStarted(streamErr, usedProtocol(e.opts.Protocol, &at) == string(ProtocolSPDY), &at) {
			if forbidden(streamErr) {
				return nil, fmt.Errorf("exec in %s/%s: %w: %w: %w", target.Namespace, target.Pod, ErrNotStarted, ErrForbidden, streamErr)
			}
			return nil, fmt.Errorf("exec in %s/%s: %w: %w", target.Namespace, target.Pod, ErrNotStarted, streamErr)
		}
		msg := strings.TrimSpace(stderr.String())
		return nil, fmt.Errorf("exec in %s/%s: no reply from the sandbox's supervisor (%v; stderr %q): %w", target.Namespace, target.Pod, streamErr, msg, err)
	}
	if rep.Error != "" {
		return &rep, fmt.Errorf("%w: %s", ErrSupervisor, rep.Error)
	}
	return &rep, nil
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
