package podexec

import (
	"time"

	"airlock.dev/airlock/internal/runwrap"
)

// Outcome says how a command ended.
type Outcome string

const (
	// OutcomeExited: the command exited by itself; see ExitCode. A command
	// that could not be started reports 127 (not found) or 126, as a shell does.
	OutcomeExited Outcome = "exited"
	// OutcomeTimeout: the wrapper's timeout fired and it killed the tree.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeSignal: the command died from a signal (see Signal).
	OutcomeSignal Outcome = "signal"
	// OutcomeOOM: the command was SIGKILLed by the kernel OOM killer (the
	// wrapper saw the cgroup's oom_kill counter grow, or the OOMChecker found
	// the container OOM-killed).
	OutcomeOOM Outcome = "oom"
	// OutcomeOutputLimit: stdout+stderr exceeded Request.KillAfterOutputBytes and
	// the wrapper killed the tree.
	OutcomeOutputLimit Outcome = "output_limit"
	// OutcomeSandboxLost: no trailer arrived: the stream broke, the container
	// or node died, or the client-side deadline passed. The exit status is
	// unknown; output received so far is returned.
	OutcomeSandboxLost Outcome = "sandbox_lost"
	// OutcomeKilled: the tree was killed on request (a background process's
	// DELETE).
	OutcomeKilled Outcome = "killed"
)

// Result is what a command did. Stdout and Stderr are valid UTF-8 (invalid
// bytes appear as \xNN) and fit the request's budget plus one marker line.
type Result struct {
	Outcome Outcome `json:"outcome"`
	// ExitCode is the command's exit status; -1 when it died from a signal or
	// the status is unknown (sandbox_lost).
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Stdout   string        `json:"stdout"`
	Stderr   string        `json:"stderr"`
	// Totals of the command's output received by the engine.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Truncated is true when either stream was cut to the budget.
	Truncated  bool       `json:"truncated"`
	Truncation Truncation `json:"truncation"`
	// OutputIncomplete: the wrapper reports more bytes than arrived (the
	// stream broke after the command finished); the files have everything.
	OutputIncomplete bool `json:"output_incomplete,omitempty"`
	// Detail explains a sandbox_lost outcome or a start failure.
	Detail string `json:"detail,omitempty"`
	// Protocol is the transport used: "websocket" or "spdy".
	Protocol string `json:"protocol"`
	// Trailer is the wrapper's raw report; nil when none arrived.
	Trailer *runwrap.Trailer `json:"trailer,omitempty"`
}

// Truncation describes both streams.
type Truncation struct {
	Stdout StreamTruncation `json:"stdout"`
	Stderr StreamTruncation `json:"stderr"`
}

// StreamTruncation describes what of one stream is in the Result.
type StreamTruncation struct {
	Truncated bool `json:"truncated"`
	// KeptBytes of the original output are in the Result (head + tail,
	// before escaping, without the marker).
	KeptBytes int `json:"kept_bytes"`
	// OmittedBytes were cut between head and tail.
	OmittedBytes int64 `json:"omitted_bytes"`
	// FullOutputPath is the file in the sandbox holding the whole stream.
	FullOutputPath string `json:"full_output_path,omitempty"`
	// InvalidUTF8Bytes were escaped as \xNN in the kept text.
	InvalidUTF8Bytes int `json:"invalid_utf8_bytes,omitempty"`
}

// Chunk is a piece of output as it arrives, for streaming (e.g. NDJSON).
// Data is valid UTF-8: a rune split across reads is held until complete,
// invalid bytes are escaped as \xNN. Offset is the byte offset of the chunk
// in its stream.
type Chunk struct {
	Stream string `json:"stream"` // "stdout" or "stderr"
	Data   string `json:"data"`
	Offset int64  `json:"offset"`
	// Raw is the exact bytes Data was made from (Raw of successive chunks
	// concatenate to the stream), for binary-safe consumers. It is only
	// valid during the callback.
	Raw []byte `json:"-"`
}
