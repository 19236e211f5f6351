package runwrap

import (
	"errors"
	"regexp"
	"time"
)

// Defaults of the run flags.
const (
	DefaultGrace        = 2 * time.Second
	DefaultKeep         = 20
	DefaultStallTimeout = 2 * time.Minute
	// ShellPath is what --shell runs; an image without it gets a clear error.
	ShellPath = "/bin/sh"
)

// Config is one command as the engine asks for it. It travels inside the
// session's TLS to PID 1 and on to the run's keeper over a socket, never in
// argv or the environment, so a command cannot read it from /proc.
type Config struct {
	// ID names the run in the supervisor's registry (its outcome can be read
	// back with OpStatus): 16-128 characters of [A-Za-z0-9_-].
	ID           string        `json:"id"`
	Timeout      time.Duration `json:"timeout"`
	Grace        time.Duration `json:"grace"`
	StallTimeout time.Duration `json:"stall_timeout"`
	Cwd          string        `json:"cwd,omitempty"`
	Env          []string      `json:"env,omitempty"`
	Shell        string        `json:"shell,omitempty"`
	Argv         []string      `json:"argv,omitempty"`
	NoStdin      bool          `json:"no_stdin,omitempty"`
	OutDir       string        `json:"out_dir,omitempty"`
	Keep         int           `json:"keep"`
	// KillAfterOutputBytes, if > 0, kills the command once stdout and stderr
	// together exceed it (outcome output_limit).
	KillAfterOutputBytes int64 `json:"kill_after_output_bytes,omitempty"`
	KeepLeftovers        bool  `json:"keep_leftovers,omitempty"`
	// ReattachGrace is how long a foreground run outlives its call's broken
	// stream for the caller to attach again (0: DefaultReattachGrace; at
	// most MaxReattachGrace); its own deadline still holds.
	ReattachGrace time.Duration `json:"reattach_grace,omitempty"`
	// Background: PID 1 answers as soon as the command started; its output
	// goes to files only, its stdin is a pipe OpStdin writes to, and the
	// outcome is read back with OpStatus. Timeout 0 means none (the
	// sandbox's own expiry still ends it).
	Background bool `json:"background,omitempty"`
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// ValidID reports whether s may name a run: 16 to 128 characters of
// [A-Za-z0-9_-], so it never needs quoting or escaping.
func ValidID(s string) bool { return idRE.MatchString(s) }

func (c *Config) validate() error {
	switch {
	case !ValidID(c.ID):
		return errors.New("id: want 16-128 characters of [A-Za-z0-9_-]")
	case c.Timeout < 0, c.Grace < 0, c.StallTimeout < 0, c.ReattachGrace < 0, c.ReattachGrace > MaxReattachGrace:
		return errors.New("durations must not be negative")
	case c.Keep < 1 || c.Keep > 10000:
		return errors.New("--keep: want 1..10000")
	case c.KillAfterOutputBytes < 0:
		return errors.New("kill_after_output_bytes must not be negative")
	case c.Shell != "" && len(c.Argv) > 0:
		return errors.New("give either --shell or an argv, not both")
	case c.Shell == "" && len(c.Argv) == 0:
		return errors.New("no command: give --shell STRING or -- ARGV")
	case c.Shell == "" && c.Argv[0] == "":
		return errors.New("empty program name")
	}
	return nil
}

// command is the argv to execute.
func (c *Config) command() []string {
	if c.Shell != "" {
		return []string{ShellPath, "-c", c.Shell}
	}
	return c.Argv
}
