package runwrap

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
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

// Config is one parsed `airlock-init run` invocation. The front passes it to
// the supervisor as JSON, so argv never has to be re-parsed there.
type Config struct {
	Nonce         string        `json:"nonce"`
	Timeout       time.Duration `json:"timeout"`
	Grace         time.Duration `json:"grace"`
	StallTimeout  time.Duration `json:"stall_timeout"`
	Cwd           string        `json:"cwd,omitempty"`
	Env           []string      `json:"env,omitempty"`
	Shell         string        `json:"shell,omitempty"`
	Argv          []string      `json:"argv,omitempty"`
	NoStdin       bool          `json:"no_stdin,omitempty"`
	OutDir        string        `json:"out_dir,omitempty"`
	Keep          int           `json:"keep"`
	MaxOutput     int64         `json:"max_output,omitempty"`
	KeepLeftovers bool          `json:"keep_leftovers,omitempty"`
}

var nonceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// ValidNonce reports whether s may be used as a trailer nonce: 16 to 128
// characters of [A-Za-z0-9_-], so it never needs quoting or escaping.
func ValidNonce(s string) bool { return nonceRE.MatchString(s) }

type envFlag struct{ vals *[]string }

func (e envFlag) String() string { return "" }
func (e envFlag) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || k == "" || strings.ContainsRune(v, 0) {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*e.vals = append(*e.vals, v)
	return nil
}

// ParseArgs parses the arguments that follow `run`:
//
//	--nonce N [--timeout D] [--grace D] [--stall-timeout D] [--cwd DIR]
//	[--env K=V]... [--no-stdin] [--out-dir DIR] [--keep N] [--max-output BYTES]
//	[--keep-leftovers] (--shell STRING | -- ARGV...)
//
// On error the returned Config still carries the nonce when one was parsed,
// so a trailer can report the usage error.
func ParseArgs(args []string) (Config, error) {
	c := Config{Grace: DefaultGrace, Keep: DefaultKeep, StallTimeout: DefaultStallTimeout}
	fs := flag.NewFlagSet("airlock-init run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Nonce, "nonce", "", "trailer nonce")
	fs.DurationVar(&c.Timeout, "timeout", 0, "kill the command tree after this long (0: never)")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "SIGTERM to SIGKILL delay")
	fs.DurationVar(&c.StallTimeout, "stall-timeout", c.StallTimeout, "a write to the stream blocked this long means the stream is lost")
	fs.StringVar(&c.Cwd, "cwd", "", "working directory")
	fs.Var(envFlag{&c.Env}, "env", "KEY=VALUE added to the environment (repeatable)")
	fs.StringVar(&c.Shell, "shell", "", "run this string with "+ShellPath+" -c")
	fs.BoolVar(&c.NoStdin, "no-stdin", false, "give the command /dev/null as stdin")
	fs.StringVar(&c.OutDir, "out-dir", "", "where full outputs are kept (default $HOME/.airlock/out)")
	fs.IntVar(&c.Keep, "keep", c.Keep, "how many past outputs to keep")
	fs.Int64Var(&c.MaxOutput, "max-output", 0, "kill the command once stdout+stderr exceed this many bytes (0: no limit)")
	fs.BoolVar(&c.KeepLeftovers, "keep-leftovers", false, "do not kill processes left behind by a command that exited on its own")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	c.Argv = fs.Args()
	return c, c.validate()
}

func (c *Config) validate() error {
	switch {
	case !ValidNonce(c.Nonce):
		return errors.New("--nonce: want 16-128 characters of [A-Za-z0-9_-]")
	case c.Timeout < 0, c.Grace < 0, c.StallTimeout < 0:
		return errors.New("durations must not be negative")
	case c.Keep < 1 || c.Keep > 10000:
		return errors.New("--keep: want 1..10000")
	case c.MaxOutput < 0:
		return errors.New("--max-output must not be negative")
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
