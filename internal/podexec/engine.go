package podexec

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"airlock.dev/airlock/internal/runwrap"
)

// DefaultWrapperPath is where sandbox pods see airlock-init (sandbox.InitBinary: the init image's volume).
const DefaultWrapperPath = "/airlock/bin/airlock-init"

// ErrNotStarted wraps errors from calls where no exec session was
// established (pod or container missing, forbidden, server unreachable):
// nothing ran.
var ErrNotStarted = errors.New("exec session not established")

// ErrRuntimeStart marks an ErrNotStarted whose session was established but
// whose process the container runtime could not start (the kubelet says
// "failed to exec in container", e.g. containerd timing out under load):
// nothing ran, and a retry may work.
var ErrRuntimeStart = errors.New("the container runtime could not start the command")

// ErrForbidden marks an ErrNotStarted whose cause is the API server refusing
// pods/exec to the caller's credentials (RBAC): a configuration error, not a
// missing pod.
var ErrForbidden = errors.New("pods/exec forbidden")

// Options configure an Engine.
type Options struct {
	Protocol Protocol // default auto
	// WrapperPath is airlock-init in the container (default DefaultWrapperPath).
	WrapperPath string
	// OutDir overrides where the wrapper keeps full outputs
	// (default $HOME/.airlock/out in the sandbox).
	OutDir string
	// DefaultTimeout applies when Request.Timeout is 0 (default 10 minutes).
	DefaultTimeout time.Duration
	// Grace is the wrapper's SIGTERM-to-SIGKILL delay (default 2s).
	Grace time.Duration
	// DeadlineMargin is added to timeout+grace for the client-side deadline,
	// so that a hung stream cannot hang the caller (default 30s).
	DeadlineMargin time.Duration
	// RuntimeStartRetry is how long a command the container runtime could
	// not start (ErrRuntimeStart: nothing ran) is retried, with backoff,
	// before the error is returned (default 15s; negative: never). A loaded
	// node refuses bursts of execs this way (containerd's "failed to load
	// task: context deadline exceeded"), and a retry moments later works.
	// A command streaming stdin from a reader is never retried.
	RuntimeStartRetry time.Duration
	// OOMChecker, if set, is asked whether a SIGKILLed or lost command was an
	// OOM kill (see PodOOMChecker).
	OOMChecker OOMChecker
	// SessionIdle is how long a sandbox's session stays open unused (default
	// DefaultSessionIdle); MaxSessions bounds the open ones (default
	// DefaultMaxSessions).
	SessionIdle time.Duration
	MaxSessions int
	Logger      logr.Logger
}

// Engine runs commands in sandbox containers: each sandbox's calls share one
// session with its PID 1 (sessions.go), one exec held open while in use.
type Engine struct {
	cfg      *rest.Config
	opts     Options
	sessions *sessionPool
}

// New returns an Engine using cfg to reach the API server.
func New(cfg *rest.Config, opts Options) (*Engine, error) {
	if cfg == nil {
		return nil, errors.New("exec: nil rest config")
	}
	switch opts.Protocol {
	case "":
		opts.Protocol = ProtocolAuto
	case ProtocolAuto, ProtocolSPDY, ProtocolWebSocket:
	default:
		return nil, fmt.Errorf("exec: unknown protocol %q", opts.Protocol)
	}
	if opts.WrapperPath == "" {
		opts.WrapperPath = DefaultWrapperPath
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 10 * time.Minute
	}
	if opts.Grace <= 0 {
		opts.Grace = runwrap.DefaultGrace
	}
	if opts.DeadlineMargin <= 0 {
		opts.DeadlineMargin = 30 * time.Second
	}
	if opts.RuntimeStartRetry == 0 {
		opts.RuntimeStartRetry = 15 * time.Second
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = DefaultSessionIdle
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	e := &Engine{cfg: rest.CopyConfig(cfg), opts: opts}
	e.sessions = newSessionPool(e.openSession, opts.SessionIdle, opts.MaxSessions)
	return e, nil
}

// Warm opens target's session in the background, if it is not open already, so that the sandbox's first
// command finds it ready (e.g. right after a create). Failures are left for that command to meet.
func (e *Engine) Warm(target Request) {
	if target.SupervisorKey == "" || len(target.targetErrors()) > 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		if _, release, err := e.sessions.acquire(ctx, &target); err == nil {
			release(false)
		}
	}()
}

// Close ends every session the engine holds open.
func (e *Engine) Close() { e.sessions.closeAll() }

// Run runs the command and returns its result with output cut to budget.
func (e *Engine) Run(ctx context.Context, req Request) (*Result, error) {
	return e.Stream(ctx, req, nil)
}

// Stream is Run that also passes output to onChunk as it arrives (never
// concurrently). onChunk sees all output, unbudgeted; if it returns an error
// the call is abandoned (the wrapper then kills the command when it notices
// the stream is gone) and that error is returned.
//
// The error is nil whenever the command ran, whatever its outcome, including
// sandbox_lost. It is non-nil (with a nil Result) for an invalid request or
// when no session could be established (ErrNotStarted), and with a partial
// Result when ctx ended or onChunk failed.
func (e *Engine) Stream(ctx context.Context, req Request, onChunk func(Chunk) error) (*Result, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	giveUp := time.Now().Add(e.opts.RuntimeStartRetry)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		res, err := e.attempt(ctx, req, onChunk)
		retry := errors.Is(err, ErrRuntimeStart) || errors.Is(err, errNeverStarted)
		if !retry || req.StdinReader != nil || time.Now().Add(wait).After(giveUp) {
			return res, err
		}
		e.opts.Logger.Info("the command did not start; starting it again", "namespace", req.Namespace,
			"pod", req.Pod, "after", wait, "error", err.Error())
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
	}
}

// attempt is one try at Stream: a session with the sandbox's PID 1, one run on it.
func (e *Engine) attempt(ctx context.Context, req Request, onChunk func(Chunk) error) (*Result, error) {
	timeout := req.Timeout
	if timeout == 0 {
		timeout = e.opts.DefaultTimeout
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	wc := wrapperConfig(&req, id, timeout, e.opts.Grace, e.opts.OutDir)
	runCtx, cancel := context.WithTimeout(ctx, timeout+e.opts.Grace+e.opts.DeadlineMargin)
	defer cancel()
	sess, release, err := e.sessions.acquire(runCtx, &req)
	if err != nil {
		return nil, err
	}

	head, tail := req.budget()
	col := newCollector(head, tail, onChunk, cancel)
	start := time.Now()
	rep, runErr := sess.Run(runCtx, &wc, req.stdin(), col.stdout(), col.stderr())
	release(runErr != nil && !sess.usable())
	if errors.Is(runErr, runwrap.ErrNoReply) && ctx.Err() == nil {
		rep, runErr = e.reattach(runCtx, &req, id, col, runErr)
		if errors.Is(runErr, errNeverStarted) {
			return nil, runErr // nothing ran: Stream may start it again
		}
	}
	elapsed := time.Since(start)
	emitErr := col.finish()
	log := e.opts.Logger.WithValues("namespace", req.Namespace, "pod", req.Pod, "protocol", sess.proto)
	if runErr == nil && rep.Error != "" {
		// PID 1 refused the request itself: nothing ran.
		return nil, fmt.Errorf("exec in %s/%s: %w: %s", req.Namespace, req.Pod, ErrSupervisor, rep.Error)
	}
	var tr *runwrap.Trailer
	if runErr == nil {
		tr = rep.Trailer
	}
	lost := tr == nil
	if lost {
		tr = e.recoverOutcome(ctx, log, &req, id)
	}
	res := &Result{Protocol: sess.proto, Duration: elapsed, Trailer: tr, ExitCode: -1}
	e.fillOutput(res, col, tr)
	e.classify(ctx, log, &req, res, tr, runErr, runCtx.Err(), start)

	switch {
	case emitErr != nil:
		return res, fmt.Errorf("exec output consumer: %w", emitErr)
	case lost && ctx.Err() != nil:
		return res, fmt.Errorf("exec in %s/%s: %w", req.Namespace, req.Pod, ctx.Err())
	}
	return res, nil
}

func (e *Engine) fillOutput(res *Result, col *collector, tr *runwrap.Trailer) {
	var outPath, errPath string
	if tr != nil {
		outPath, errPath = tr.StdoutPath, tr.StderrPath
	}
	res.Stdout, res.Truncation.Stdout, res.StdoutBytes = col.render(0, outPath)
	res.Stderr, res.Truncation.Stderr, res.StderrBytes = col.render(1, errPath)
	res.Truncated = res.Truncation.Stdout.Truncated || res.Truncation.Stderr.Truncated
	if tr != nil && (res.StdoutBytes < tr.StdoutBytes || res.StderrBytes < tr.StderrBytes) {
		res.OutputIncomplete = true
	}
}

// classify sets Outcome, ExitCode, Signal and Detail. PID 1's reply is the
// only source of a trusted status: without it the outcome is sandbox_lost.
func (e *Engine) classify(ctx context.Context, log logr.Logger, req *Request, res *Result, tr *runwrap.Trailer, runErr, deadlineErr error, start time.Time) {
	if tr == nil {
		res.Outcome = OutcomeSandboxLost
		switch {
		case deadlineErr != nil && ctx.Err() == nil:
			res.Detail = "no result before the client-side deadline (timeout + grace + margin)"
		case runErr != nil:
			res.Detail = "the session with the sandbox's supervisor ended without the command's outcome: " + runErr.Error()
		default:
			res.Detail = "the sandbox's supervisor reported no outcome"
		}
		if ctx.Err() == nil && e.oomKilled(ctx, log, req, start) {
			res.Outcome = OutcomeOOM
		}
		return
	}
	res.ExitCode, res.Signal = tr.ExitCode, tr.Signal
	res.Outcome, res.Detail = TrailerOutcome(tr)
	switch res.Outcome {
	case OutcomeSandboxLost:
		res.ExitCode, res.Signal = -1, ""
	case OutcomeSignal:
		if tr.Signal == "SIGKILL" && e.oomKilled(ctx, log, req, start) {
			res.Outcome = OutcomeOOM
		}
	}
}

// TrailerOutcome is the outcome a trailer reports, with its detail. A
// SIGKILL it cannot explain is OutcomeSignal: the engine then also asks the
// OOMChecker.
func TrailerOutcome(tr *runwrap.Trailer) (Outcome, string) {
	switch {
	case tr.WrapperError != "":
		return OutcomeSandboxLost, "wrapper failed: " + tr.WrapperError
	case tr.StreamLost:
		return OutcomeSandboxLost, "the exec stream was lost; the sandbox's supervisor killed the command"
	case tr.OOMGuard != "":
		return OutcomeOOM, tr.OOMGuard
	case tr.Killed:
		return OutcomeKilled, ""
	case tr.TimedOut:
		return OutcomeTimeout, ""
	case tr.OutputLimit:
		return OutcomeOutputLimit, ""
	case tr.OOMKills > 0 && (tr.Signal == "SIGKILL" || tr.Signal == "" && tr.ExitCode == 128+9):
		// A shell reports its OOM-killed child as exit 137 (runc: the kernel kills inside the container's cgroup).
		return OutcomeOOM, fmt.Sprintf("the kernel OOM-killed %d process(es) in the sandbox during the command", tr.OOMKills)
	case tr.Signal != "":
		return OutcomeSignal, ""
	}
	return OutcomeExited, tr.StartError
}

// reattach follows run id again after its call's session broke (an API-server or kubelet restart, a network
// blip): on a fresh session, from the output the collector already has. PID 1 keeps the run going meanwhile
// for its reattach grace, so the caller gets its real outcome and all of its output. While no session can be
// opened (the API server is down) it tries again with a growing pause, until shortly before the grace ends.
func (e *Engine) reattach(ctx context.Context, req *Request, id string, col *collector, runErr error) (*runwrap.Reply, error) {
	giveUp := time.Now().Add(runwrap.DefaultReattachGrace - reattachMargin)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		e.opts.Logger.Info("the session broke during a run; following it again", "namespace", req.Namespace, "pod", req.Pod,
			"error", runErr.Error())
		rep, err := e.attachOnce(ctx, req, id, col)
		switch {
		case err == nil:
			return rep, nil
		case errors.Is(err, errRunGone), errors.Is(err, errNeverStarted), errors.Is(err, ErrNotStarted) && notFound(err):
			return nil, err // PID 1 restarted, or the pod is gone
		}
		runErr = err
		if ctx.Err() != nil || time.Now().Add(wait).After(giveUp) {
			return nil, runErr
		}
		select {
		case <-ctx.Done():
			return nil, runErr
		case <-time.After(wait):
		}
	}
}

// reattachMargin is left of PID 1's reattach grace for the last attach to arrive in time.
const reattachMargin = 3 * time.Second

// errRunGone is an attach PID 1 refused: it does not know the run (it restarted), or cannot resume it.
var errRunGone = errors.New("the run cannot be followed again")

func (e *Engine) attachOnce(ctx context.Context, req *Request, id string, col *collector) (*runwrap.Reply, error) {
	sess, release, err := e.sessions.acquire(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%w: reopening the session: %w", runwrap.ErrNoReply, err)
	}
	rep, err := sess.Attach(ctx, id, col.received(), col.stdout(), col.stderr())
	release(err != nil && !sess.usable())
	switch {
	case err != nil:
		return nil, err
	case rep.Error != "" && !rep.Known:
		return nil, fmt.Errorf("exec in %s/%s: %w: %w: %s", req.Namespace, req.Pod, ErrNotStarted, errNeverStarted, rep.Error)
	case rep.Error != "":
		return nil, fmt.Errorf("%w: %w: %s", runwrap.ErrNoReply, errRunGone, rep.Error)
	}
	return rep, nil
}

// errNeverStarted is a run PID 1 does not know after its session broke: the break came before PID 1 took it,
// so it never ran, and can be started again.
var errNeverStarted = errors.New("the session broke before the command started")

// recoverOutcome asks the sandbox's supervisor (PID 1), on a new session,
// for the outcome of a run whose answer broke off. Nobody can use the run's
// output any more, so it is cancelled (PID 1 has usually noticed already).
// nil when the supervisor does not answer: the sandbox is lost.
func (e *Engine) recoverOutcome(ctx context.Context, log logr.Logger, req *Request, id string) *runwrap.Trailer {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.DeadlineMargin)
	defer cancel()
	sess, release, err := e.sessions.acquire(ctx, req)
	if err != nil {
		log.V(1).Info("asking the supervisor for a lost run's outcome", "error", err.Error())
		return nil
	}
	rep, err := sess.Control(ctx, &runwrap.Request{Op: runwrap.OpStatus, Config: runwrap.Config{ID: id}, Cancel: true, Wait: e.opts.Grace + 5*time.Second})
	release(err != nil && !sess.usable())
	if err != nil || !rep.Done || rep.Trailer == nil {
		log.V(1).Info("asking the supervisor for a lost run's outcome", "error", fmt.Sprint(err))
		return nil
	}
	log.V(1).Info("outcome read back from the supervisor")
	return rep.Trailer
}

func (e *Engine) oomKilled(ctx context.Context, log logr.Logger, req *Request, since time.Time) bool {
	if e.opts.OOMChecker == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	oom, err := e.opts.OOMChecker.OOMKilled(ctx, req.Namespace, req.Pod, req.Container, since)
	if err != nil {
		log.Error(err, "checking for an OOM kill")
	}
	return oom
}

// newID returns a run id: 32 random URL-safe characters (192 bits).
func newID() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
