package runwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"golang.org/x/net/http2"

	"airlock.dev/airlock/internal/pid1link"
)

// SessionClient makes calls on a session with PID 1 (pid1link.Dial's connection): the gateway's side of
// session.go.
type SessionClient struct {
	cc *http2.ClientConn
}

// NewSessionClient returns a client for calls on cc.
func NewSessionClient(cc *http2.ClientConn) *SessionClient { return &SessionClient{cc: cc} }

// ErrNoReply is a run whose answer ended before its reply: the session broke or the call was cancelled. The
// run's outcome may still be read with OpStatus.
var ErrNoReply = errors.New("the run's answer ended without its reply")

// maxControlReply bounds a control reply: an output read holds up to 1 MiB per stream, base64-encoded. A longer
// one is refused from its header, before anything is allocated for it.
const maxControlReply = 4 << 20

// Run runs cfg in the foreground: stdin (nil for none) is streamed to the command, its output is written to
// stdout and stderr as it comes (never concurrently), and its reply is returned once all output was written.
// An error from stdout or stderr abandons the call and is returned.
func (c *SessionClient) Run(ctx context.Context, cfg *Config, stdin io.Reader, stdout, stderr io.Writer) (*Reply, error) {
	var head bytes.Buffer
	if err := WriteFrame(&head, cfg); err != nil {
		return nil, err
	}
	var body io.Reader = &head
	if stdin != nil {
		body = interruptible(io.MultiReader(&head, stdin))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.call(ctx, PathRun, body)
	if err != nil {
		// The session may have broken after PID 1 took the run: an attach tells (it knows the run, or not).
		return nil, fmt.Errorf("%w: %w", ErrNoReply, err)
	}
	return readAnswer(resp, stdout, stderr)
}

// Attach follows the foreground run id, whose call ended before its reply (ErrNoReply), from offsets (how much
// of stdout and stderr the caller has): the rest of its output is written to stdout and stderr, and its reply
// returned. PID 1 keeps an unfollowed run for its Config's ReattachGrace.
func (c *SessionClient) Attach(ctx context.Context, id string, offsets [2]int64, stdout, stderr io.Writer) (*Reply, error) {
	var body bytes.Buffer
	if err := WriteFrame(&body, &Request{Op: OpAttach, Config: Config{ID: id}, StdoutOffset: offsets[0], StderrOffset: offsets[1]}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.call(ctx, PathAttach, &body)
	if err != nil {
		return nil, err
	}
	return readAnswer(resp, stdout, stderr)
}

// readAnswer reads a run's answer: output frames, then the reply.
func readAnswer(resp *http.Response, stdout, stderr io.Writer) (*Reply, error) {
	defer resp.Body.Close()
	buf := make([]byte, 0, 64<<10)
	for {
		kind, payload, err := pid1link.ReadFrame(resp.Body, buf)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoReply, err)
		}
		buf = payload[:0]
		switch kind {
		case pid1link.FrameStdout:
			if _, err := stdout.Write(payload); err != nil {
				return nil, err
			}
		case pid1link.FrameStderr:
			if _, err := stderr.Write(payload); err != nil {
				return nil, err
			}
		case pid1link.FrameReply:
			var rep Reply
			if err := json.Unmarshal(payload, &rep); err != nil {
				return nil, fmt.Errorf("decode run reply: %w", err)
			}
			return &rep, nil
		default:
			return nil, fmt.Errorf("unknown frame kind %q in a run's answer", kind)
		}
	}
}

// Control sends one control request (OpRun with Background, OpStatus, OpList, OpOutput, OpStdin, OpSignal,
// OpKill) and returns PID 1's reply.
func (c *SessionClient) Control(ctx context.Context, req *Request) (*Reply, error) {
	var body bytes.Buffer
	if err := WriteFrame(&body, req); err != nil {
		return nil, err
	}
	resp, err := c.call(ctx, PathControl, &body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	n, err := readFrameHeader(resp.Body, maxControlReply)
	if err != nil {
		return nil, fmt.Errorf("read control reply: %w", err)
	}
	if req.ReserveReply != nil {
		if err := req.ReserveReply(n); err != nil {
			return nil, fmt.Errorf("a control reply of %d bytes: %w", n, err)
		}
	}
	var rep Reply
	if err := readFrameBody(resp.Body, n, &rep); err != nil {
		return nil, fmt.Errorf("read control reply: %w", err)
	}
	return &rep, nil
}

func (c *SessionClient) call(ctx context.Context, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pid1link.CallURL(path), body)
	if err != nil {
		return nil, fmt.Errorf("session call: %w", err)
	}
	resp, err := c.cc.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("session call %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("session call %s: %s", path, resp.Status)
	}
	return resp, nil
}

// interruptible reads r through a pipe, so that closing it (HTTP/2 does when the call ends before the body was
// all sent: a command that does not read its stdin) ends a read blocked in r for the call, not for ever.
func interruptible(r io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	return pr
}

// Usable reports whether the session can take another call.
func (c *SessionClient) Usable() bool { return c.cc.CanTakeNewRequest() }

// Close ends the session.
func (c *SessionClient) Close() error { return c.cc.Close() }
