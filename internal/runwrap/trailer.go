package runwrap

// TrailerVersion is the "v" field of the outcome; bump it on incompatible changes.
const TrailerVersion = 1

// Trailer is a run's outcome, as the keeper (or PID 1, when the keeper was
// killed) reports it to PID 1, and PID 1 to the gateway: inside the session's
// TLS, after all of the run's output, so the command can neither forge it nor
// get data of its own after it.
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
