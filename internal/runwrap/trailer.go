package runwrap

import (
	"encoding/json"
	"fmt"
)

// TrailerVersion is the "v" field of the trailer; bump it on incompatible changes.
const TrailerVersion = 1

// Trailer is the machine-readable end of a run. It is written as the last
// bytes of stderr, as "\n" + nonce + " " + JSON + "\n". The leading newline
// belongs to the trailer (not to the command's stderr), so the trailer always
// starts a line whether or not the command's output ended with one.
//
// Only the final line of stderr can be the trailer: a trailer-looking line in
// the middle of the output is the command's own data. The command never holds
// the stream itself (only pipes to its keeper), and the supervisor always
// writes the real trailer after all of the command's output (PID 1 writes it
// when the keeper was killed), so even a command that knew the nonce could
// not make a forged line the last one. The nonce (fresh per call, sent on
// stdin, never in argv or the environment) only marks where the trailer is.
type Trailer struct {
	V int `json:"v"`
	// ExitCode is the command's exit status, -1 if it died from a signal, 126 or
	// 127 (as a shell reports) if it could not be started.
	ExitCode int `json:"exit_code"`
	// Signal is the terminating signal's name ("SIGKILL"), empty if it exited.
	Signal string `json:"signal,omitempty"`
	// TimedOut: the wrapper's --timeout fired and it killed the tree.
	TimedOut bool `json:"timed_out"`
	// OutputLimit: the output exceeded --max-output and the tree was killed.
	OutputLimit bool   `json:"output_limit,omitempty"`
	StdoutPath  string `json:"stdout_path,omitempty"`
	StderrPath  string `json:"stderr_path,omitempty"`
	// Byte counts of everything the command wrote (all of it is in the files,
	// unless FileError says otherwise).
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	DurationMS  int64 `json:"duration_ms"`
	// OOMKills is how much the container cgroup's oom_kill counter grew during
	// the run; -1 when the counter is not readable (e.g. some gVisor setups).
	OOMKills int64 `json:"oom_kills"`
	// LeftoversKilled counts processes still alive after the command exited
	// that the wrapper killed.
	LeftoversKilled int `json:"leftovers_killed,omitempty"`
	// StreamLost: the tree was killed because the stream broke or the engine
	// cancelled the run after losing it.
	StreamLost bool `json:"stream_lost,omitempty"`
	// OOMGuard, when set, says why PID 1's memory guard SIGKILLed the command
	// (the sandbox neared its memory limit and this was the largest tree).
	OOMGuard string `json:"oom_guard,omitempty"`
	// Killed: the tree was killed on request (OpKill).
	Killed     bool   `json:"killed,omitempty"`
	StartError string `json:"start_error,omitempty"`
	FileError  string `json:"file_error,omitempty"`
	// WrapperError means the wrapper itself failed; the fields above may then
	// be incomplete.
	WrapperError string `json:"wrapper_error,omitempty"`
	// Timings say where the keeper's time went (for the exec breakdown).
	Timings *Timings `json:"timings,omitempty"`
}

// Timings are microseconds from the keeper's receipt of the run to: its
// output files opened, the command started, the command exited, its output
// pipes drained, and the files closed and rotated (just before the trailer).
type Timings struct {
	FilesUS   int64 `json:"files_us"`
	StartedUS int64 `json:"started_us"`
	ExitedUS  int64 `json:"exited_us"`
	DrainedUS int64 `json:"drained_us"`
	DoneUS    int64 `json:"done_us"`
}

// FormatTrailer renders t for nonce as it appears at the end of stderr.
func FormatTrailer(nonce string, t Trailer) ([]byte, error) {
	if !ValidNonce(nonce) {
		return nil, fmt.Errorf("invalid nonce %q", nonce)
	}
	t.V = TrailerVersion
	js, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode trailer: %w", err)
	}
	out := make([]byte, 0, len(nonce)+len(js)+3)
	out = append(out, '\n')
	out = append(out, nonce...)
	out = append(out, ' ')
	out = append(out, js...)
	return append(out, '\n'), nil
}
