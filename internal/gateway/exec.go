package gateway

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/podexec"
)

// ExecResponse is the result of a command. exit_code, duration_ms, stdout, stderr and truncated keep the
// names and meanings existing clients rely on.
type ExecResponse struct {
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Truncated  bool   `json:"truncated"`
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
	KeptBytes      int    `json:"kept_bytes"`
	OmittedBytes   int64  `json:"omitted_bytes"`
	FullOutputPath string `json:"full_output_path,omitempty"`
}

// responseOf is the API's view of a result; err, if any, says why the call was cut short.
func responseOf(res *podexec.Result, err error) ExecResponse {
	st := func(t podexec.StreamTruncation) StreamTruncation {
		return StreamTruncation{Truncated: t.Truncated, KeptBytes: t.KeptBytes, OmittedBytes: t.OmittedBytes, FullOutputPath: t.FullOutputPath}
	}
	r := ExecResponse{
		ExitCode: res.ExitCode, DurationMS: res.Duration.Milliseconds(), Stdout: res.Stdout, Stderr: res.Stderr,
		Truncated: res.Truncated, Outcome: string(res.Outcome), Signal: res.Signal,
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		Truncation:       Truncation{Stdout: st(res.Truncation.Stdout), Stderr: st(res.Truncation.Stderr)},
		OutputIncomplete: res.OutputIncomplete, Detail: res.Detail,
	}
	if err != nil {
		r.Detail = strings.TrimPrefix(r.Detail+"; ", "; ") + "the call ended early: " + err.Error()
	}
	return r
}

// handleExec answers POST /exec: a background process (processes.go), a streamed command (NDJSON) or a
// whole result.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, e := sandboxID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	// Memory first: the body is read only within the budget, then the reservation becomes the command's.
	mem, e := s.reserve(p, s.bodyCost(r))
	if e != nil {
		writeError(w, e)
		return
	}
	defer mem.release()
	var req ExecRequest
	if !s.readJSON(w, r, &req, noValidation) {
		return
	}
	if req.Background {
		s.startBackgroundCall(w, r, p, id, &req)
		return
	}
	// The server's write timeout is for ordinary calls; a command may run up to its own timeout.
	hooks := deadlineHooks(w)
	if wantsNDJSON(r) {
		s.streamExec(w, r, p, id, &req, mem, hooks)
		return
	}
	resp, e := s.runCommand(r.Context(), p, id, &req, mem, hooks)
	if e != nil {
		writeError(w, e)
		return
	}
	// A result with an error (the call was cut short) is still the best answer there is.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = writeExecResult(w, *resp)
}

// startBackgroundCall starts req as a background process: 202 once it runs in the sandbox.
func (s *Server) startBackgroundCall(w http.ResponseWriter, r *http.Request, p auth.Principal, id string, req *ExecRequest) {
	if e := req.validate(s.opts.MaxExecTimeout.Milliseconds()); e != nil {
		writeError(w, e)
		return
	}
	sb, e := s.readySandbox(r.Context(), p, id)
	if e != nil {
		writeError(w, e)
		return
	}
	s.startBackgroundSlot(w, r, p, sb, req)
}

// execDeadlineSlack is added to a command's timeout for the response's write deadline: the engine's grace
// and deadline margin, and the time to send the result.
const execDeadlineSlack = time.Minute

// extendDeadlines moves the connection's read and write deadlines to d from now, past the server's timeouts
// for ordinary calls. The read deadline matters even once the body is read: when it passes, net/http's
// background read fails and cancels the request's context, which would abandon the command. Recorders in
// tests do not support deadlines; nothing to extend there.
func extendDeadlines(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	at := time.Now().Add(d)
	_ = rc.SetReadDeadline(at)
	_ = rc.SetWriteDeadline(at)
}

// deadlineHooks extend the connection's deadlines once a call is admitted, by as long as it may take.
func deadlineHooks(w http.ResponseWriter) callHooks {
	return callHooks{admitted: func(d time.Duration) { extendDeadlines(w, d) }}
}

// reserve takes n bytes of the memory budget for the caller, counting refusals.
func (s *Server) reserve(p auth.Principal, n int64) (*reservation, *Error) {
	r, e := s.memory.reserve(p.Tenant, n)
	if e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
	}
	return r, e
}

// readySandbox returns the caller's sandbox if commands may run in it, else 404 or 409 with its phase.
func (s *Server) readySandbox(ctx context.Context, p auth.Principal, id string) (*airlockv1.Sandbox, *Error) {
	sb, e := s.lookup(ctx, s.opts.Reader, p, id)
	if e != nil {
		return nil, e
	}
	if sb.DeletionTimestamp != nil || sb.Status.Phase != airlockv1.PhaseReady {
		e := &Error{Status: http.StatusConflict, Code: CodeNotReady, Phase: statusOf(sb),
			Message: "sandbox " + id + " is " + statusOf(sb) + ", not ready"}
		if c := meta.FindStatusCondition(sb.Status.Conditions, airlockv1.ConditionReady); c != nil && c.Status != "True" {
			e.Reason = c.Reason
			if c.Message != "" {
				e.Message += ": " + c.Message
			}
		}
		return nil, e
	}
	if _, e := s.sandboxSecrets(ctx, sb); e != nil {
		return nil, e
	}
	return sb, nil
}

// execRequest turns the API request into the engine's, with the sandbox's defaults.
func (s *Server) execRequest(ctx context.Context, sb *airlockv1.Sandbox, req *ExecRequest) podexec.Request {
	wd := workingDir(sb)
	xr := s.target(sb)
	xr.Argv, xr.Shell, xr.Cwd, xr.Env = req.Argv, req.Command, wd, s.execEnv(ctx, sb, req.Env)
	xr.Timeout, xr.KeepBytes = DefaultExecTimeout*time.Millisecond, int(s.outputBudget(ctx, sb))
	if req.Cwd != "" {
		xr.Cwd = req.Cwd
		if !strings.HasPrefix(req.Cwd, "/") {
			xr.Cwd = path.Join(wd, req.Cwd)
		}
	}
	if req.Stdin != nil {
		// A reader, not a copy: stdin may be most of the body.
		xr.StdinReader = strings.NewReader(*req.Stdin)
	}
	if req.TimeoutMS != nil {
		xr.Timeout = time.Duration(*req.TimeoutMS) * time.Millisecond
	}
	if req.MaxOutputBytes != nil {
		xr.KeepBytes = int(*req.MaxOutputBytes)
	}
	if req.KillAfterOutputBytes != nil {
		xr.KillAfterOutputBytes = *req.KillAfterOutputBytes
	}
	return xr
}

func podName(sb *airlockv1.Sandbox) string {
	if sb.Status.PodName != "" {
		return sb.Status.PodName
	}
	return sb.Name
}

// outputBudget is the template's outputLimitBytes, else the gateway's default. A template that cannot be
// read (deleted since) does not fail the command.
func (s *Server) outputBudget(ctx context.Context, sb *airlockv1.Sandbox) int64 {
	if sb.Spec.TemplateRef != nil {
		var t airlockv1.SandboxTemplate
		err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: sb.Spec.TemplateRef.Name}, &t)
		if err == nil && t.Spec.OutputLimitBytes != nil {
			return *t.Spec.OutputLimitBytes
		}
	}
	return s.opts.DefaultOutputBytes
}

func (s *Server) observeExec(p auth.Principal, res *podexec.Result) {
	s.metrics.execDuration.WithLabelValues(string(res.Outcome)).Observe(res.Duration.Seconds())
	s.metrics.execs.WithLabelValues(p.Tenant, string(res.Outcome)).Inc()
	s.metrics.outputBytes.WithLabelValues(p.Tenant, "stdout").Add(float64(res.StdoutBytes))
	s.metrics.outputBytes.WithLabelValues(p.Tenant, "stderr").Add(float64(res.StderrBytes))
}

// execError maps an engine error that came without a result. ns is the sandbox's namespace, for the message
// an operator needs when the gateway's own permissions are wrong.
func (s *Server) execError(err error, ns string) *Error {
	switch {
	case errors.Is(err, podexec.ErrInvalidRequest):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: err.Error()}
	case errors.Is(err, podexec.ErrForbidden):
		s.opts.Logger.Error(err, "the gateway may not exec into sandbox pods: grant its ServiceAccount pods/exec (get, create) in this namespace (config/gateway/rbac.yaml)", "namespace", ns)
		return &Error{Status: http.StatusInternalServerError, Code: CodeMisconfigured, cause: err,
			Message: "the gateway is not allowed to run commands in namespace " + ns + " (RBAC: pods/exec get and create); an operator must fix the gateway's role; the command did not run"}
	case errors.Is(err, podexec.ErrRuntimeStart):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: time.Second,
			Message: "the node's container runtime could not start the command (it did not run; the node may be overloaded): " + err.Error()}
	case errors.Is(err, podexec.ErrNoSupervisorKey):
		return &Error{Status: http.StatusConflict, Code: CodeNotReady,
			Message: "the sandbox's supervisor has no attested key in its status (a sandbox made before this release: recreate it); the command did not run"}
	case errors.Is(err, pid1link.ErrWrongKey):
		s.opts.Logger.Error(err, "a sandbox's supervisor did not prove the key its status records", "namespace", ns)
		return &Error{Status: http.StatusBadGateway, Code: CodeUnavailable, RetryAfter: time.Second,
			Message: "the sandbox did not prove the supervisor key recorded for it; the command did not run"}
	case errors.Is(err, podexec.ErrNotStarted) && isNetError(err):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: retryAfterBudget, Message: "the cluster is unreachable; the command did not run"}
	case errors.Is(err, podexec.ErrNotStarted):
		return &Error{Status: http.StatusConflict, Code: CodeNotReady, Message: "the command could not be started in the sandbox (its pod may be gone); it did not run"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "request ended before the command started"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error running the command", cause: err}
}
