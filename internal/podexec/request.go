package podexec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"airlock.dev/airlock/internal/runwrap"
)

// Request is one command to run in a sandbox container.
type Request struct {
	Namespace string
	Pod       string
	// Container may be empty when the pod has one container.
	Container string
	// SupervisorKey is the key the sandbox's PID 1 attested (Sandbox
	// status.supervisorKey): the engine talks only to its holder.
	SupervisorKey string
	// Exactly one of Argv and Shell: Argv runs as is (looked up in the
	// container's PATH); Shell runs with /bin/sh -c (error if the image has no
	// /bin/sh). Both travel on the exec's stdin, never in the URL (which the
	// API server's audit log records).
	Argv  []string
	Shell string
	// Cwd defaults to the container's working directory.
	Cwd string
	// Env is added to the container's environment.
	Env map[string]string
	// Stdin is given to the command; nil means EOF at once (/dev/null).
	Stdin []byte
	// StdinReader, instead of Stdin, is streamed to the command until it
	// returns EOF (an error also ends the command's stdin: the caller, which
	// sees its own reader's error, must not trust the command's result then).
	StdinReader io.Reader
	// Timeout kills the whole process tree in the sandbox; 0 means
	// Options.DefaultTimeout.
	Timeout time.Duration
	// KeepBytes is the per-stream budget of output returned inline (default
	// 16 KiB): a small head and the tail, with a marker in between.
	KeepBytes int
	// HeadBytes is the part of KeepBytes taken from the start (default
	// min(1 KiB, KeepBytes/4)); negative keeps no head.
	HeadBytes int
	// KillAfterOutputBytes, if > 0, is a hard cap on stdout+stderr bytes:
	// PID 1 kills the command once it is exceeded (outcome output_limit).
	// (KeepBytes is what comes back inline; this is what the command may write.)
	KillAfterOutputBytes int64
	// ReserveReply, for StartBackground, is called with the length of PID 1's
	// reply before it is read (runwrap.Request.ReserveReply).
	ReserveReply func(n int) error
	// KeepBackground leaves processes the command started in the background
	// running after it exits (their output must go to files). By default they
	// are killed. On timeout, output limit or stream loss everything is killed.
	KeepBackground bool
}

// Defaults.
const (
	DefaultKeepBytes = 16 << 10
	DefaultHeadBytes = 1 << 10
	MinKeepBytes     = 256
)

// budget returns the kept head and tail sizes.
func (r *Request) budget() (head, tail int) {
	keep := r.KeepBytes
	if keep == 0 {
		keep = DefaultKeepBytes
	}
	switch {
	case r.HeadBytes < 0:
		head = 0
	case r.HeadBytes == 0:
		head = min(DefaultHeadBytes, keep/4)
	default:
		head = min(r.HeadBytes, keep)
	}
	return head, keep - head
}

func (r *Request) validate() error {
	errs := r.targetErrors()
	switch {
	case len(r.Argv) > 0 && r.Shell != "":
		errs = append(errs, "give either argv or shell, not both")
	case len(r.Argv) == 0 && r.Shell == "":
		errs = append(errs, "no command: give argv or shell")
	case len(r.Argv) > 0 && r.Argv[0] == "":
		errs = append(errs, "argv[0] is empty")
	}
	for _, a := range append([]string{r.Shell, r.Cwd}, r.Argv...) {
		if strings.ContainsRune(a, 0) {
			errs = append(errs, "NUL byte in command or cwd")
			break
		}
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			errs = append(errs, fmt.Sprintf("bad env name or value %q", k))
		}
	}
	if r.Stdin != nil && r.StdinReader != nil {
		errs = append(errs, "give either stdin bytes or a stdin reader, not both")
	}
	if r.Timeout < 0 {
		errs = append(errs, "timeout must not be negative")
	}
	if r.KeepBytes != 0 && r.KeepBytes < MinKeepBytes {
		errs = append(errs, "keep bytes must be 0 (default) or at least "+strconv.Itoa(MinKeepBytes))
	}
	if r.KillAfterOutputBytes < 0 {
		errs = append(errs, "kill-after output bytes must not be negative")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, strings.Join(errs, "; "))
	}
	return nil
}

func (r *Request) hasStdin() bool { return r.Stdin != nil || r.StdinReader != nil }

// targetErrors checks the namespace, pod and container names.
func (r *Request) targetErrors() []string {
	var errs []string
	for _, m := range validation.IsDNS1123Subdomain(r.Namespace) {
		errs = append(errs, "namespace: "+m)
	}
	for _, m := range validation.IsDNS1123Subdomain(r.Pod) {
		errs = append(errs, "pod: "+m)
	}
	if r.Container != "" {
		for _, m := range validation.IsDNS1123Label(r.Container) {
			errs = append(errs, "container: "+m)
		}
	}
	return errs
}

// stdin is what client-go copies to the command, nil for none.
func (r *Request) stdin() io.Reader {
	if r.StdinReader != nil {
		return r.StdinReader
	}
	if r.Stdin != nil {
		return bytes.NewReader(r.Stdin)
	}
	return nil
}

// ErrInvalidRequest wraps every Request validation error.
var ErrInvalidRequest = errors.New("invalid exec request")

// wrapperConfig is the run request PID 1 gets inside the session; the exec's
// argv is fixed (WRAPPER connect) and carries no secret.
func wrapperConfig(r *Request, id string, timeout, grace time.Duration, outDir string) runwrap.Config {
	c := runwrap.Config{
		ID: id, Timeout: timeout, Grace: grace, StallTimeout: runwrap.DefaultStallTimeout,
		Cwd: r.Cwd, Shell: r.Shell, Argv: r.Argv, NoStdin: !r.hasStdin(), OutDir: outDir, Keep: runwrap.DefaultKeep,
		KillAfterOutputBytes: r.KillAfterOutputBytes, KeepLeftovers: r.KeepBackground,
	}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Env = append(c.Env, k+"="+r.Env[k])
	}
	return c
}
