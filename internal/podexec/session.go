package podexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/runwrap"
)

// ErrNoSupervisorKey is a target whose Sandbox has no recorded supervisor key (status.supervisorKey): its PID 1
// has not attested yet, or the Sandbox predates attestation. No session is opened without it.
var ErrNoSupervisorKey = errors.New("the sandbox's supervisor key is not known (status.supervisorKey)")

// closeWait bounds how long closing a session waits for its exec to end on its own before cancelling it: a
// process in the sandbox that got hold of the stream can keep the exec open.
const closeWait = 2 * time.Second

// session is one exec of `airlock-init connect` carrying a session with the sandbox's PID 1 (pid1link): TLS
// pinned to the key PID 1 attested, then HTTP/2 calls.
type session struct {
	*runwrap.SessionClient
	proto  string
	cancel context.CancelFunc
	done   chan struct{} // closed once the exec returned
	// execErr and stderr are the exec's status and the client's own diagnostics; read after done.
	execErr error
	stderr  bytes.Buffer
}

// handshakeTries bounds the sessions opened for one call when the handshake fails: a process of the sandbox
// user that reached a client's stream before it became undumpable can break that one session (never forge
// one), and the next client is a fresh process. handshakeTimeout bounds each handshake (a stolen ClientHello
// leaves both sides waiting).
const (
	handshakeTries   = 3
	handshakeTimeout = 10 * time.Second
)

// errHandshake marks a session whose exec ran but whose handshake failed: worth another try.
var errHandshake = errors.New("no session with the sandbox's supervisor")

// openSession execs the connect client in target's container and runs the session's handshake over the exec's
// stdin and stdout, trying again when the exec ran but the handshake failed. The session lives until close or
// ctx's end. Errors that show nothing ran wrap ErrNotStarted (with ErrForbidden or ErrRuntimeStart when that is
// the cause).
func (e *Engine) openSession(ctx context.Context, target *Request) (*session, error) {
	err := ctx.Err()
	for try := 0; try < handshakeTries && ctx.Err() == nil; try++ {
		var s *session
		if s, err = e.openSessionOnce(ctx, target); err == nil || !errors.Is(err, errHandshake) {
			return s, err
		}
		e.opts.Logger.Info("no session with the sandbox's supervisor; opening another", "namespace", target.Namespace,
			"pod", target.Pod, "try", try+1, "error", err.Error())
	}
	return nil, err
}

func (e *Engine) openSessionOnce(ctx context.Context, target *Request) (*session, error) {
	if target.SupervisorKey == "" {
		return nil, fmt.Errorf("exec in %s/%s: %w: %w", target.Namespace, target.Pod, ErrNotStarted, ErrNoSupervisorKey)
	}
	pin, err := pid1link.ParsePublicKey(target.SupervisorKey)
	if err != nil {
		return nil, fmt.Errorf("exec in %s/%s: %w: %w", target.Namespace, target.Pod, ErrNotStarted, err)
	}
	u, err := execURL(e.cfg, target, []string{e.opts.WrapperPath, "connect"})
	if err != nil {
		return nil, err
	}
	var at attempt
	ex, err := newExecutor(e.cfg, e.opts.Protocol, u, &at)
	if err != nil {
		return nil, err
	}
	ours, theirs := net.Pipe()
	execCtx, cancel := context.WithCancel(ctx)
	s := &session{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		stderr := &limitedWriter{w: &s.stderr, n: 4 << 10}
		s.execErr = ex.StreamWithContext(execCtx, remotecommand.StreamOptions{Stdin: theirs, Stdout: theirs, Stderr: stderr})
		_ = theirs.Close() // the handshake or the calls see the end
	}()
	hctx, hcancel := context.WithTimeout(ctx, handshakeTimeout)
	cc, err := pid1link.Dial(hctx, ours, pin)
	hcancel()
	if err != nil {
		_ = ours.Close()
		ended := s.end()
		s.proto = usedProtocol(e.opts.Protocol, &at)
		if !ended {
			return nil, fmt.Errorf("exec in %s/%s: %w: %w: %w (the exec did not end when cancelled)", target.Namespace, target.Pod, ErrNotStarted, errHandshake, err)
		}
		return nil, s.openError(target, err, &at)
	}
	s.proto = usedProtocol(e.opts.Protocol, &at)
	s.SessionClient = runwrap.NewSessionClient(cc)
	return s, nil
}

// openError says why a session could not be opened, from the exec's own status where it has one.
func (s *session) openError(target *Request, dialErr error, at *attempt) error {
	where := fmt.Sprintf("exec in %s/%s", target.Namespace, target.Pod)
	switch {
	case runtimeStartFailed(s.execErr):
		return fmt.Errorf("%s: %w: %w: %w", where, ErrNotStarted, ErrRuntimeStart, s.execErr)
	case notStarted(s.execErr, s.proto == string(ProtocolSPDY), at) && forbidden(s.execErr):
		return fmt.Errorf("%s: %w: %w: %w", where, ErrNotStarted, ErrForbidden, s.execErr)
	case notStarted(s.execErr, s.proto == string(ProtocolSPDY), at):
		return fmt.Errorf("%s: %w: %w", where, ErrNotStarted, s.execErr)
	}
	msg := strings.TrimSpace(s.stderr.String())
	return fmt.Errorf("%s: %w: %w: %w (exec: %v; its stderr: %q)", where, ErrNotStarted, errHandshake, dialErr, s.execErr, msg)
}

// usable reports whether the session can take another call: its exec still runs and its HTTP/2 connection
// takes new streams.
func (s *session) usable() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	return s.Usable()
}

// close ends the session and its exec.
func (s *session) close() {
	_ = s.SessionClient.Close()
	s.end()
}

// end waits a moment for the exec to end on its own, then cancels it and waits as long again; false if it
// still has not returned (client-go may not interrupt an upgrade a server never answers): execErr and stderr
// must not be read then.
func (s *session) end() bool {
	select {
	case <-s.done:
		s.cancel()
		return true
	case <-time.After(closeWait):
	}
	s.cancel()
	select {
	case <-s.done:
		return true
	case <-time.After(closeWait):
		return false
	}
}
