package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ExitTimeout is the exit code of a command that timed out, as timeout(1) reports it.
const ExitTimeout = 124

// DefaultExecTimeout is a command's time limit when ExecOptions.Timeout is zero.
const DefaultExecTimeout = 60 * time.Second

// ExecOptions tune one command; the zero value runs it with the defaults.
type ExecOptions struct {
	// Timeout kills the command's whole process tree (default 60s, at most the gateway's --max-exec-timeout).
	Timeout time.Duration
	// Cwd is the directory to run in (default the sandbox's working directory).
	Cwd string
	Env map[string]string
	// Stdin is the command's whole standard input; without it stdin is closed.
	Stdin *string
	// MaxOutputBytes is the per-stream budget returned inline (default the template's).
	MaxOutputBytes int64
	// OnStdout and OnStderr receive output as it arrives (the call then streams NDJSON). They run on the
	// calling goroutine; returning an error ends the call with it.
	OnStdout, OnStderr func(data string) error
	// ErrorOnTimeout returns an *ExecTimeoutError (with the result) when the command times out, instead of
	// only the result.
	ErrorOnTimeout bool
}

// ExecResult is what a command did. A non-zero exit is a result, never an error.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	// Truncated: the gateway cut a stream to its budget (see Truncation).
	Truncated bool `json:"truncated"`
	// Outcome is exited, timeout, signal, oom, output_limit or sandbox_lost.
	Outcome          string     `json:"outcome"`
	Signal           string     `json:"signal,omitempty"`
	StdoutBytes      int64      `json:"stdout_bytes"`
	StderrBytes      int64      `json:"stderr_bytes"`
	Truncation       Truncation `json:"truncation"`
	OutputIncomplete bool       `json:"output_incomplete,omitempty"`
	Detail           string     `json:"detail,omitempty"`
}

// Truncation says, per stream, what of the output is inline and where the rest is.
type Truncation struct {
	Stdout StreamTruncation `json:"stdout"`
	Stderr StreamTruncation `json:"stderr"`
}

// StreamTruncation describes one stream.
type StreamTruncation struct {
	Truncated      bool   `json:"truncated"`
	KeptBytes      int64  `json:"kept_bytes"`
	OmittedBytes   int64  `json:"omitted_bytes"`
	FullOutputPath string `json:"full_output_path,omitempty"`
}

// Duration is DurationMS as a time.Duration.
func (r *ExecResult) Duration() time.Duration { return time.Duration(r.DurationMS) * time.Millisecond }

type execRequest struct {
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
	TimeoutMS      int64             `json:"timeout_ms"`
	MaxOutputBytes int64             `json:"max_output_bytes,omitempty"`
}

// Exec runs a shell command (sh -c) in the sandbox.
func (s *Sandbox) Exec(ctx context.Context, command string, opts ExecOptions) (*ExecResult, error) {
	return s.exec(ctx, execRequest{Command: command}, opts)
}

// ExecArgv runs argv without a shell.
func (s *Sandbox) ExecArgv(ctx context.Context, argv []string, opts ExecOptions) (*ExecResult, error) {
	return s.exec(ctx, execRequest{Argv: argv}, opts)
}

func (s *Sandbox) exec(ctx context.Context, in execRequest, opts ExecOptions) (*ExecResult, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	in.Cwd, in.Env, in.Stdin, in.MaxOutputBytes = opts.Cwd, opts.Env, opts.Stdin, opts.MaxOutputBytes
	in.TimeoutMS = timeout.Milliseconds()
	body, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("airlock: encoding exec: %w", err)
	}
	req := request{method: "POST", path: s.path("/exec"), body: body, contentType: "application/json"}
	streaming := opts.OnStdout != nil || opts.OnStderr != nil
	if streaming {
		req.accept = "application/x-ndjson"
	}
	resp, err := s.c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res *ExecResult
	if streaming {
		res, err = readStream(resp.Body, opts)
	} else {
		res = &ExecResult{}
		if err = json.NewDecoder(resp.Body).Decode(res); err != nil {
			err = fmt.Errorf("airlock: decoding the exec result: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if res.Outcome == "timeout" {
		// The gateway reports the killed process's status (often -1); a reader of ExitCode alone must see a failure.
		res.ExitCode = ExitTimeout
		if opts.ErrorOnTimeout {
			return res, &ExecTimeoutError{Result: res}
		}
	}
	return res, nil
}

// readStream reads NDJSON: {"stream", "data"} lines as output arrives, then the result (or an error) last.
func readStream(body io.Reader, opts ExecOptions) (*ExecResult, error) {
	r := bufio.NewReader(body)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l struct {
				Stream string          `json:"stream"`
				Data   string          `json:"data"`
				Error  *Error          `json:"error"`
				Exit   json.RawMessage `json:"exit_code"`
			}
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return nil, fmt.Errorf("airlock: exec stream: bad line: %w", jerr)
			}
			switch {
			case l.Error != nil:
				return nil, l.Error
			case l.Exit != nil:
				res := &ExecResult{}
				if jerr := json.Unmarshal(line, res); jerr != nil {
					return nil, fmt.Errorf("airlock: exec stream: bad result: %w", jerr)
				}
				return res, nil
			case l.Stream == "stdout" && opts.OnStdout != nil:
				if cerr := opts.OnStdout(l.Data); cerr != nil {
					return nil, cerr
				}
			case l.Stream == "stderr" && opts.OnStderr != nil:
				if cerr := opts.OnStderr(l.Data); cerr != nil {
					return nil, cerr
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil, errors.New("airlock: exec stream ended without a result")
		}
		if err != nil {
			return nil, fmt.Errorf("airlock: reading the exec stream: %w", err)
		}
	}
}
