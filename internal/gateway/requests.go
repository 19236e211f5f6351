package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/allowlist"
	"airlock.dev/airlock/internal/sandbox"
)

// CreateRequest is the body of POST /v1/sandboxes. Every field is optional: clients that send only
// {"size": "small", "timeout_minutes": 30} get the default template.
type CreateRequest struct {
	Template           string            `json:"template,omitempty"`
	Size               string            `json:"size,omitempty"`
	TimeoutMinutes     *int              `json:"timeout_minutes,omitempty"`
	IdleTimeoutMinutes *int              `json:"idle_timeout_minutes,omitempty"`
	Network            string            `json:"network,omitempty"`
	Allow              []string          `json:"allow,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	// Secrets are like env, but kept in a Secret owned by the sandbox, never in its pod or Sandbox, and masked
	// in the output the gateway returns (secrets.go).
	Secrets  map[string]string `json:"secrets,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Wait     *bool             `json:"wait,omitempty"`
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the new total lifetime, counted from creation.
type TimeoutRequest struct {
	TimeoutMinutes *int `json:"timeout_minutes"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	Command   string            `json:"command,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Stdin     *string           `json:"stdin,omitempty"`
	TimeoutMS *int64            `json:"timeout_ms,omitempty"`
	// MaxOutputBytes is the per-stream budget returned inline (head + tail); more is cut and marked truncated.
	MaxOutputBytes *int64 `json:"max_output_bytes,omitempty"`
	// KillAfterOutputBytes kills the command once stdout+stderr exceed it (outcome output_limit).
	KillAfterOutputBytes *int64 `json:"kill_after_output_bytes,omitempty"`
	// Background starts the command as a background process (202 with its process_id) instead of waiting.
	Background bool `json:"background,omitempty"`
}

// Limits of request fields.
const (
	MaxTimeoutMinutes = 24 * 60
	maxEnv            = 64
	maxEnvValue       = 32 << 10
	maxMetadata       = 16
	maxMetadataKey    = 63
	maxMetadataValue  = 256
	maxArgv           = 4096
	maxCommandBytes   = 64 << 10 // a longer script belongs on stdin
	MinOutputBytes    = 256
	// MaxInlineOutput caps max_output_bytes: what a model can use inline is far less, and every call reserves
	// its worst case from the gateway's memory budget (execCost). The full output stays in the sandbox's file.
	MaxInlineOutput    = 1 << 20
	DefaultExecTimeout = 60_000 // ms
)

var (
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	metaKeyRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	sizeValues = map[string]airlockv1.Size{"small": airlockv1.SizeSmall, "medium": airlockv1.SizeMedium, "large": airlockv1.SizeLarge}
)

// readJSON bounds the body, decodes it into v and validates it, answering any error itself.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any, validate func() *Error) bool {
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	e := decodeJSON(r, v)
	if e == nil {
		e = validate()
	}
	if e != nil {
		writeError(w, e)
		return false
	}
	return true
}

// noValidation is readJSON's validate for a request the service layer validates itself.
func noValidation() *Error { return nil }

// decodeJSON reads one JSON object strictly: unknown fields are errors that name the field, trailing data is an
// error.
func decodeJSON(r *http.Request, v any) *Error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	// Anything but the end of the body after the object is an error: More misses a stray '}' or ']'.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err)
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: "body: trailing data after the JSON object"}
	}
	return nil
}

func jsonError(err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("body: larger than %d bytes", mbe.Limit)}
	case errors.As(err, &te):
		return badField(te.Field, "must be %s, not %s", jsonType(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: fmt.Sprintf("body: malformed JSON at byte %d: %v", se.Offset, se)}
	case errors.Is(err, io.EOF):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: "body: empty; send a JSON object"}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badField(f, "unknown field")
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: "body: " + err.Error()}
}

func jsonType(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return kind
}

func (c *CreateRequest) validate() *Error {
	if c.Template != "" {
		if errs := validation.IsDNS1123Subdomain(c.Template); len(errs) > 0 {
			return badField("template", "not a valid template name: %s", errs[0])
		}
	}
	if c.Size != "" {
		if _, ok := sizeValues[c.Size]; !ok {
			return badField("size", "must be one of small, medium, large; got %q", c.Size)
		}
	}
	if c.TimeoutMinutes != nil && (*c.TimeoutMinutes < 1 || *c.TimeoutMinutes > MaxTimeoutMinutes) {
		return badField("timeout_minutes", "must be between 1 and %d", MaxTimeoutMinutes)
	}
	if c.IdleTimeoutMinutes != nil {
		switch idle := *c.IdleTimeoutMinutes; {
		case idle < 1 || idle > MaxTimeoutMinutes:
			return badField("idle_timeout_minutes", "must be between 1 and %d", MaxTimeoutMinutes)
		case c.TimeoutMinutes != nil && idle > *c.TimeoutMinutes:
			return badField("idle_timeout_minutes", "must not exceed timeout_minutes (%d): the hard timeout caps the whole lifetime", *c.TimeoutMinutes)
		}
	}
	switch c.Network {
	case "", "none", "restricted":
	default:
		return badField("network", `must be "none" or "restricted"; got %q`, c.Network)
	}
	if len(c.Allow) > 0 && c.Network != "restricted" {
		return badField("allow", `needs network "restricted"`)
	}
	if _, err := allowlist.Parse(c.Allow); err != nil {
		return badField("allow", "%v", err)
	}
	// The create's env is the pod's (or, claimed warm from a pool, bound late to every command, but a cold start
	// puts it in the pod), so the pod's reserved names apply; secrets reach each command only.
	if e := validateEnv("env", c.Env, sandbox.CheckPodEnvName); e != nil {
		return e
	}
	if e := checkEnvNames("secrets", c.Secrets, sandbox.CheckCommandEnvName); e != nil {
		return e
	}
	if len(c.Metadata) > maxMetadata {
		return badField("metadata", "at most %d entries", maxMetadata)
	}
	for k, v := range c.Metadata {
		if len(k) > maxMetadataKey || !metaKeyRE.MatchString(k) {
			return badField("metadata", "key %q: want 1-%d characters of [A-Za-z0-9_.-], starting and ending alphanumeric", k, maxMetadataKey)
		}
		if len(v) > maxMetadataValue {
			return badField("metadata", "value of %q: at most %d bytes", k, maxMetadataValue)
		}
	}
	return nil
}

// validateEnv checks an env's size, names and values; reserved says which names Airlock keeps for itself there
// (sandbox.CheckPodEnvName or CheckCommandEnvName).
func validateEnv(field string, env map[string]string, reserved func(string) error) *Error {
	if len(env) > maxEnv {
		return badField(field, "at most %d variables", maxEnv)
	}
	for k, v := range env {
		if len(k) > 256 || !envNameRE.MatchString(k) {
			return badField(field, "name %q: must match [A-Za-z_][A-Za-z0-9_]*", k)
		}
		if len(v) > maxEnvValue || strings.ContainsRune(v, 0) {
			return badField(field, "value of %s: at most %d bytes, no NUL", k, maxEnvValue)
		}
	}
	return checkEnvNames(field, env, reserved)
}

// checkEnvNames refuses the first reserved name of env, in name order so that the answer does not vary.
func checkEnvNames(field string, env map[string]string, reserved func(string) error) *Error {
	for _, k := range sortedKeys(env) {
		if err := reserved(k); err != nil {
			return badField(field, "%v", err)
		}
	}
	return nil
}

func (t *TimeoutRequest) validate() *Error {
	if t.TimeoutMinutes == nil {
		return badField("timeout_minutes", "is required: the new total lifetime in minutes, counted from creation")
	}
	if *t.TimeoutMinutes < 1 || *t.TimeoutMinutes > MaxTimeoutMinutes {
		return badField("timeout_minutes", "must be between 1 and %d", MaxTimeoutMinutes)
	}
	return nil
}

// validate checks the request against the gateway's limits; maxTimeoutMS is the operator's cap.
func (x *ExecRequest) validate(maxTimeoutMS int64) *Error {
	switch {
	case x.Command != "" && len(x.Argv) > 0:
		return badField("command", "give either command or argv, not both")
	case x.Command == "" && len(x.Argv) == 0:
		return badField("command", `is required (a shell string), or give "argv" (an array)`)
	case len(x.Argv) > 0 && x.Argv[0] == "":
		return badField("argv", "argv[0] must not be empty")
	case len(x.Argv) > maxArgv:
		return badField("argv", "at most %d elements", maxArgv)
	}
	n := len(x.Command)
	for i, a := range x.Argv {
		n += len(a)
		if strings.ContainsRune(a, 0) {
			return badField("argv", "argv[%d] contains a NUL byte", i)
		}
	}
	if strings.ContainsRune(x.Command, 0) {
		return badField("command", "contains a NUL byte")
	}
	if n > maxCommandBytes {
		return badField("command", "longer than %d bytes: pass large scripts on stdin", maxCommandBytes)
	}
	if len(x.Cwd) > maxPathLen || strings.ContainsRune(x.Cwd, 0) {
		return badField("cwd", "too long or contains a NUL byte")
	}
	// One command's env reaches that command alone: only Airlock's own names are reserved.
	if e := validateEnv("env", x.Env, sandbox.CheckCommandEnvName); e != nil {
		return e
	}
	if x.TimeoutMS != nil && (*x.TimeoutMS < 1 || *x.TimeoutMS > maxTimeoutMS) {
		return badField("timeout_ms", "must be between 1 and %d", maxTimeoutMS)
	}
	if x.MaxOutputBytes != nil && (*x.MaxOutputBytes < MinOutputBytes || *x.MaxOutputBytes > MaxInlineOutput) {
		return badField("max_output_bytes", "must be between %d and %d", MinOutputBytes, MaxInlineOutput)
	}
	if x.KillAfterOutputBytes != nil && *x.KillAfterOutputBytes < 1 {
		return badField("kill_after_output_bytes", "must be positive")
	}
	return nil
}
