package runwrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Frames: "AIRLOCK1 " + decimal length + "\n" + JSON. They carry requests and
// replies between the gateway and PID 1 inside a session's calls (a run's
// Config is followed by its stdin), between the connect client and PID 1, and
// between PID 1 and its keepers.
const (
	frameMagic = "AIRLOCK1 "
	// maxFrame bounds a request (argv, shell script, env); larger stdin
	// belongs after the frame.
	maxFrame = 8 << 20
)

// Operations a client asks of the supervisor.
const (
	// OpSession, from the connect client over PID 1's socket: serve a session
	// on the two descriptors passed with it (the exec's stdin and stdout).
	OpSession = "session"
	OpRun     = "run"
	// OpAttach: follow a foreground run already going (its call ended) from
	// StdoutOffset and StderrOffset: the rest of its output, then its reply.
	OpAttach = "attach"
	OpStatus = "status"
	// Background processes (Config.Background): list runs, read a run's
	// output from byte offsets, write to its stdin, signal or kill its tree.
	OpList   = "list"
	OpOutput = "output"
	OpStdin  = "stdin"
	OpSignal = "signal"
	OpKill   = "kill"
	// opMemoryKill, from PID 1 to a keeper: the memory guard chose this run;
	// kill the command now and say so in the trailer.
	opMemoryKill = "memory_kill"
	// opCancel, from PID 1 to a keeper: the engine lost the stream.
	opCancel = "cancel"
	// opPipes, from PID 1 to a keeper right after the run: the command's
	// output pipes (read and write ends of stdout, then of stderr).
	opPipes = "pipes"
)

// Request is what a client hands the supervisor. For OpRun, Config is the
// command; for OpStatus only ID, Wait and Cancel matter.
type Request struct {
	Op string `json:"op"`
	Config
	// Wait, for OpStatus, is how long to wait for a running command to end.
	Wait time.Duration `json:"wait,omitempty"`
	// Cancel, for OpStatus: kill the command if it is still running (the
	// caller lost its stream), then report.
	Cancel bool `json:"cancel,omitempty"`
	// Reason, for opMemoryKill, goes into Trailer.OOMGuard.
	Reason string `json:"reason,omitempty"`
	// StdoutOffset, StderrOffset and Limit, for OpOutput: where to start
	// reading each stream's file and how many bytes of each to return; for
	// OpAttach, how much of each stream the caller already has.
	StdoutOffset int64 `json:"stdout_offset,omitempty"`
	StderrOffset int64 `json:"stderr_offset,omitempty"`
	Limit        int   `json:"limit,omitempty"`
	// Data, for OpStdin, is written to the command's stdin; EOF then closes it.
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
	// Signal, for OpSignal (and from PID 1 to a keeper), names the signal.
	Signal string `json:"signal,omitempty"`
	// ReserveReply, on a session client's side only (never sent), is called with the length of PID 1's reply
	// before it is read, so that the caller counts the memory first (a process list or an output read can be
	// megabytes); an error abandons the call and is returned, wrapped.
	ReserveReply func(n int) error `json:"-"`
}

// Reply is the supervisor's answer to a client.
type Reply struct {
	// Error: the request was refused or the supervisor failed.
	Error string `json:"error,omitempty"`
	// Known is false when the supervisor has no record of the ID.
	Known bool `json:"known"`
	// Done: the command ended and Trailer is its outcome.
	Done    bool     `json:"done"`
	Trailer *Trailer `json:"trailer,omitempty"`
	// Code is the keeper's exit code for the outcome (clientCode).
	Code int `json:"code"`
	// Process describes the run (OpRun with Background, OpStatus, OpOutput,
	// and from a keeper to PID 1 once the command started).
	Process *ProcInfo `json:"process,omitempty"`
	// Processes, for OpList, are the runs PID 1 knows, oldest first.
	Processes []ProcInfo `json:"processes,omitempty"`
	// Output, for OpOutput.
	Output *Output `json:"output,omitempty"`
	// Accepted, from a keeper to PID 1, says it holds the run, before it starts the command: a keeper that
	// dies before saying so never started it, and the run goes to a fresh keeper.
	Accepted bool `json:"accepted,omitempty"`
	// Idle, from a keeper to PID 1 after a run's final reply, says the run left nothing behind and the keeper
	// may take another run.
	Idle bool `json:"idle,omitempty"`
}

// ProcInfo is a run as PID 1's registry knows it.
type ProcInfo struct {
	ID         string    `json:"id"`
	Command    []string  `json:"command"`
	Background bool      `json:"background,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Running    bool      `json:"running"`
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	StdoutPath string    `json:"stdout_path,omitempty"`
	StderrPath string    `json:"stderr_path,omitempty"`
	// Trailer is the outcome once the run ended.
	Trailer *Trailer `json:"trailer,omitempty"`
}

// Output is what OpOutput read: each stream's bytes from the requested
// offset, and the file's size at the time (the offset to ask for next is
// offset + len(bytes)).
type Output struct {
	Stdout     []byte `json:"stdout"`
	Stderr     []byte `json:"stderr"`
	StdoutSize int64  `json:"stdout_size"`
	StderrSize int64  `json:"stderr_size"`
}

// WriteFrame writes v as one frame.
func WriteFrame(w io.Writer, v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	b := append([]byte(frameMagic+strconv.Itoa(len(js))+"\n"), js...)
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// ReadFrame reads exactly one frame into v and nothing after it, so the bytes
// that follow (the command's stdin) stay unread. r should be unbuffered.
func ReadFrame(r io.Reader, v any) error {
	n, err := readFrameHeader(r, maxFrame)
	if err != nil {
		return err
	}
	return readFrameBody(r, n, v)
}

// readFrameHeader reads a frame's header and returns its length, refusing one over limit.
func readFrameHeader(r io.Reader, limit int) (int, error) {
	hdr := make([]byte, 0, 32)
	var c [1]byte
	for len(hdr) < cap(hdr) {
		if _, err := io.ReadFull(r, c[:]); err != nil {
			return 0, fmt.Errorf("read frame header: %w", err)
		}
		if c[0] == '\n' {
			break
		}
		hdr = append(hdr, c[0])
	}
	if len(hdr) <= len(frameMagic) || string(hdr[:len(frameMagic)]) != frameMagic {
		return 0, errors.New("not an airlock frame")
	}
	n, err := strconv.Atoi(string(hdr[len(frameMagic):]))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad frame length %q", hdr[len(frameMagic):])
	}
	if n > limit {
		return 0, fmt.Errorf("frame of %d bytes: at most %d", n, limit)
	}
	return n, nil
}

// readFrameBody reads the n bytes of a frame's JSON into v.
func readFrameBody(r io.Reader, n int, v any) error {
	js := make([]byte, n)
	if _, err := io.ReadFull(r, js); err != nil {
		return fmt.Errorf("read frame: %w", err)
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}
