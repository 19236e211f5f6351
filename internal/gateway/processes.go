package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/runwrap"
	"airlock.dev/airlock/internal/sandbox"
)

// Background processes live in the sandbox's PID 1 (its registry and output files), not in the gateway: any
// replica answers for any process, and a gateway restart loses nothing.

// ProcessController starts and steers background processes; *podexec.Engine is the real one.
type ProcessController interface {
	StartBackground(ctx context.Context, req podexec.Request) (*runwrap.ProcInfo, error)
	Control(ctx context.Context, target podexec.Request, req runwrap.Request) (*runwrap.Reply, error)
}

// ProcessView is a background process as the API shows it.
type ProcessView struct {
	ProcessID  string     `json:"process_id"`
	PID        int        `json:"pid,omitempty"`
	Command    []string   `json:"command"`
	Status     string     `json:"status"` // running or exited
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Outcome    string     `json:"outcome,omitempty"`
	Signal     string     `json:"signal,omitempty"`
	Detail     string     `json:"detail,omitempty"`
	StdoutPath string     `json:"stdout_path,omitempty"`
	StderrPath string     `json:"stderr_path,omitempty"`
}

// ProcessOutput is a process with its output from the requested byte offsets. The next call passes
// stdout_offset and stderr_offset back; output never arrives twice or with a gap.
type ProcessOutput struct {
	ProcessView
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutOffset int64  `json:"stdout_offset"`
	StderrOffset int64  `json:"stderr_offset"`
	// StdoutSize and StderrSize are the files' sizes when read: more is waiting when an offset is below.
	StdoutSize int64 `json:"stdout_size"`
	StderrSize int64 `json:"stderr_size"`
}

// StdinRequest writes to a background process's stdin.
type StdinRequest struct {
	Data string `json:"data"`
	// EOF closes stdin after data.
	EOF bool `json:"eof,omitempty"`
}

// SignalRequest signals a background process's tree.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// Limits of the process calls.
const (
	defaultProcessRead = 64 << 10
	maxProcessWaitMS   = 20_000
	maxStdinBytes      = 1 << 20
)

// allowedSignals are what an agent needs to steer a process; SIGKILL of the whole tree is DELETE.
var allowedSignals = map[string]bool{"SIGINT": true, "SIGTERM": true, "SIGHUP": true, "SIGQUIT": true,
	"SIGUSR1": true, "SIGUSR2": true, "SIGKILL": true, "SIGSTOP": true, "SIGCONT": true}

func viewOfProcess(p *runwrap.ProcInfo) ProcessView {
	v := ProcessView{ProcessID: p.ID, PID: p.PID, Command: p.Command, Status: "running", StartedAt: p.StartedAt,
		StdoutPath: p.StdoutPath, StderrPath: p.StderrPath}
	if tr := p.Trailer; tr != nil {
		v.Status = "exited"
		if !p.EndedAt.IsZero() {
			end := p.EndedAt
			v.EndedAt = &end
		}
		outcome, detail := podexec.TrailerOutcome(tr)
		code := tr.ExitCode
		if outcome == podexec.OutcomeSandboxLost {
			code = -1
		}
		v.ExitCode, v.Outcome, v.Signal, v.Detail = &code, string(outcome), tr.Signal, detail
	}
	return v
}

// processes returns the engine's process controller, or answers 501.
func (s *Server) processes(w http.ResponseWriter) (ProcessController, bool) {
	pc, ok := s.opts.Engine.(ProcessController)
	if !ok {
		writeError(w, &Error{Status: http.StatusNotImplemented, Code: CodeInternal, Message: "this gateway's engine has no background processes"})
	}
	return pc, ok
}

// startBackgroundSlot starts a background process holding an exec slot and callOverhead of memory for the start
// only.
func (s *Server) startBackgroundSlot(w http.ResponseWriter, r *http.Request, p auth.Principal, sb *airlockv1.Sandbox, req *ExecRequest) {
	release, e := s.acquireExec(p)
	if e != nil {
		writeError(w, e)
		return
	}
	defer release()
	mem, e := s.reserve(p, callOverhead)
	if e != nil {
		writeError(w, e)
		return
	}
	defer mem.release()
	defer s.opts.Activity.Begin(sb.Namespace, sb.Name)() // later, RenewBackground renews while it runs
	s.startBackground(w, r, p, sb, req, mem)
}

// startBackground answers an exec with "background": true: 202 once the command runs in the sandbox. mem, which
// holds callOverhead, counts the start's reply, and the reply to stdin given at start, before each is read.
func (s *Server) startBackground(w http.ResponseWriter, r *http.Request, p auth.Principal, sb *airlockv1.Sandbox, req *ExecRequest, mem *reservation) {
	pc, ok := s.processes(w)
	if !ok {
		return
	}
	xr := s.execRequest(r.Context(), sb, req)
	xr.Timeout, xr.StdinReader = 0, nil // no default timeout: the sandbox's expiry ends it
	xr.ReserveReply = func(n int) error { return asError(mem.resize(callOverhead + replyCost(n))) }
	if req.TimeoutMS != nil {
		xr.Timeout = time.Duration(*req.TimeoutMS) * time.Millisecond
	}
	if s.opts.LogCommands {
		s.opts.Logger.Info("exec", "tenant", p.Tenant, "sandbox", sb.Name, "background", true, "argv", xr.Argv, "shell", xr.Shell)
	}
	info, err := pc.StartBackground(r.Context(), xr)
	if err != nil {
		writeError(w, s.maskerFor(r.Context(), sb).error(s.processError(err, sb.Namespace)))
		return
	}
	s.audit(sb, reasonExec, "Exec", "background process %s started by key %s", info.ID, p.KeyID)
	if req.Stdin != nil && *req.Stdin != "" {
		// Given at start: written now, stdin stays open for more.
		in := runwrap.Request{Op: runwrap.OpStdin, Config: runwrap.Config{ID: info.ID}, Data: []byte(*req.Stdin),
			ReserveReply: func(n int) error { return asError(mem.resize(callOverhead + replyCost(n))) }}
		if _, err := pc.Control(r.Context(), s.target(sb), in); err != nil {
			writeError(w, s.maskerFor(r.Context(), sb).error(s.processError(err, sb.Namespace)))
			return
		}
	}
	writeJSON(w, http.StatusAccepted, s.maskerFor(r.Context(), sb).process(viewOfProcess(info)))
}

// target is the engine's address of sb's supervisor: its pod's container and the key its PID 1 attested.
func (s *Server) target(sb *airlockv1.Sandbox) podexec.Request {
	return podexec.Request{Namespace: sb.Namespace, Pod: podName(sb), Container: sandbox.ContainerName,
		SupervisorKey: sb.Status.SupervisorKey}
}

// processCall is one call of the process endpoints: a ready sandbox of the caller's, an exec slot, memory, and
// the process id from the path.
type processCall struct {
	pc  ProcessController
	sb  *airlockv1.Sandbox
	pid string
	// mask masks the sandbox's secrets in what the call answers (nil: it has none).
	mask *masker
	// mem holds base, what the call needs besides PID 1's replies; control grows it by each reply before
	// reading it.
	mem  *reservation
	base int64
	// answerPerReplyByte is what the answer holds per byte of a reply, for calls that answer with the reply
	// re-encoded (the list).
	answerPerReplyByte int64
	end                func()
}

// openProcessCall checks the call and takes what it holds: an exec slot and callOverhead of memory.
func (s *Server) openProcessCall(w http.ResponseWriter, r *http.Request, p auth.Principal) (*processCall, bool) {
	pc, ok := s.processes(w)
	if !ok {
		return nil, false
	}
	id, e := sandboxID(r)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	pid := r.PathValue("pid")
	if pid != "" && !runwrap.ValidID(pid) {
		writeError(w, notFound("process "+strconv.Quote(pid)))
		return nil, false
	}
	sb, e := s.readySandbox(r.Context(), p, id)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	release, e := s.acquireExec(p)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	mem, e := s.reserve(p, callOverhead)
	if e != nil {
		release()
		writeError(w, e)
		return nil, false
	}
	end := s.opts.Activity.Begin(sb.Namespace, sb.Name) // reading or steering a process is using the sandbox
	return &processCall{pc: pc, sb: sb, pid: pid, mask: s.maskerFor(r.Context(), sb), mem: mem, base: callOverhead,
		end: func() { end(); mem.release(); release() }}, true
}

// hold sets what the call needs besides PID 1's replies to base bytes.
func (c *processCall) hold(base int64) *Error {
	c.base = base
	return c.mem.resize(base)
}

// control sends one request about c's sandbox and maps "unknown" to 404. PID 1's reply is counted in the
// call's memory before it is read: a reply the budget cannot hold ends the call with 429 or 503.
func (s *Server) control(w http.ResponseWriter, r *http.Request, c *processCall, req runwrap.Request) (*runwrap.Reply, bool) {
	req.ReserveReply = func(n int) error {
		return asError(c.mem.resize(c.base + replyCost(n) + c.answerPerReplyByte*int64(n)))
	}
	rep, err := c.pc.Control(r.Context(), s.target(c.sb), req)
	if err != nil {
		e := s.processError(err, c.sb.Namespace)
		if e.Code == CodeOutputBudget || e.Code == CodeGatewayBusy {
			s.metrics.rejected.WithLabelValues(c.sb.Namespace, e.Code).Inc()
		}
		writeError(w, c.mask.error(e))
		return nil, false
	}
	if !rep.Known {
		writeError(w, notFound("process "+strconv.Quote(req.ID)))
		return nil, false
	}
	return rep, true
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	c, ok := s.openProcessCall(w, r, p)
	if !ok {
		return
	}
	defer c.end()
	c.answerPerReplyByte = listAnswerPerReplyByte
	rep, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpList})
	if !ok {
		return
	}
	out := struct {
		Processes []ProcessView `json:"processes"`
	}{Processes: []ProcessView{}}
	for i := range rep.Processes {
		if rep.Processes[i].Background {
			out.Processes = append(out.Processes, c.mask.process(viewOfProcess(&rep.Processes[i])))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listAnswerPerReplyByte bounds the list's answer per byte of PID 1's list: the views hold the reply's strings,
// and their JSON is at most the reply's plus the outcome's words.
const listAnswerPerReplyByte = 2

// getProcess answers the process with its output from stdout_offset / stderr_offset (max_bytes of each,
// default 64 KiB); wait_ms waits up to that long for a running process to end first.
func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	q := r.URL.Query()
	outOff, e1 := queryInt(q.Get("stdout_offset"), "stdout_offset", 0, 1<<62)
	errOff, e2 := queryInt(q.Get("stderr_offset"), "stderr_offset", 0, 1<<62)
	limit, e3 := queryInt(q.Get("max_bytes"), "max_bytes", 1, MaxInlineOutput)
	wait, e4 := queryInt(q.Get("wait_ms"), "wait_ms", 0, maxProcessWaitMS)
	if e := errors.Join(e1, e2, e3, e4); e != nil {
		var ae *Error
		_ = errors.As(e, &ae)
		writeError(w, ae)
		return
	}
	if q.Get("max_bytes") == "" {
		limit = defaultProcessRead
	}
	c, ok := s.openProcessCall(w, r, p)
	if !ok {
		return
	}
	defer c.end()
	// Each stream is read up to hold bytes either side of the asked range, so that a value
	// crossing its edges is masked whole, whatever offsets and sizes the caller picks.
	// A few bytes more at the end let a read finish a character it would cut, however small max_bytes is.
	mask := c.mask
	if mask == nil {
		mask = &masker{}
	}
	hold := int64(max(mask.hold, utf8.UTFMax-1))
	if e := c.hold(callOverhead + outputAnswerCost(mask, limit+2*hold)); e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
		writeError(w, e)
		return
	}
	if wait > 0 {
		if _, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpStatus, Config: runwrap.Config{ID: c.pid}, Wait: time.Duration(wait) * time.Millisecond}); !ok {
			return
		}
	}
	readOut, readErr := max(outOff-hold, 0), max(errOff-hold, 0)
	rep, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpOutput, Config: runwrap.Config{ID: c.pid},
		StdoutOffset: readOut, StderrOffset: readErr, Limit: int(limit + 2*hold)})
	if !ok {
		return
	}
	out := ProcessOutput{ProcessView: c.mask.process(viewOfProcess(rep.Process)), StdoutOffset: outOff, StderrOffset: errOff}
	if o := rep.Output; o != nil {
		running := rep.Process.Trailer == nil
		out.Stdout, out.StdoutOffset = readText(mask, o.Stdout, readOut, outOff, limit, o.StdoutSize, running)
		out.Stderr, out.StderrOffset = readText(mask, o.Stderr, readErr, errOff, limit, o.StderrSize, running)
		out.StdoutSize, out.StderrSize = o.StdoutSize, o.StderrSize
	}
	writeJSON(w, http.StatusOK, out)
}

// outputAnswerCost is the most the answer to an output read of n bytes per stream holds besides PID 1's reply:
// for each stream its text and the text's JSON. A byte read becomes at most g bytes of text (textGrowth) and
// at most max(g, 6) of JSON (a control byte is escaped as \u00XX); a value cut at either edge of the read adds
// at most a whole [masked:NAME] to both.
func outputAnswerCost(mask *masker, n int64) int64 {
	g, marker := textGrowth(mask)
	return 2 * ((g+max(g, 6))*n + 2*2*marker)
}

// textGrowth is the most text one byte of output becomes: 3 (U+FFFD for an invalid byte), or more where a
// short secret value is shown as a longer [masked:NAME]; and the longest such marker.
func textGrowth(mask *masker) (g, marker int64) {
	g = 3
	for i, v := range mask.values {
		shown := int64(len("[masked:]") + len(mask.names[i]))
		g, marker = max(g, (shown+int64(len(v))-1)/int64(len(v))), max(marker, shown)
	}
	return g, marker
}

// readText renders what a read of one stream returned: win holds the file's bytes from winOff, the caller asked
// for limit bytes from off. It returns the text and the offset the next read starts from.
func readText(mask *masker, win []byte, winOff, off, limit, size int64, running bool) (string, int64) {
	start := int(min(off-winOff, int64(len(win))))
	end := int(min(off-winOff+limit, int64(len(win))))
	more := running || winOff+int64(len(win)) < size
	text, next := mask.window(win, start, end, more)
	return text, off + int64(next-start)
}

// textOf renders output bytes as text and says how many bytes it consumed: a character cut at the end is left
// for the next read when more may follow; invalid bytes become U+FFFD.
func textOf(b []byte, more bool) (string, int) {
	n := len(b)
	if more {
		for i := 1; i <= utf8.UTFMax-1 && i <= n; i++ {
			if utf8.RuneStart(b[n-i]) {
				if !utf8.FullRune(b[n-i:]) {
					n -= i
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(string(b[:n]), "\uFFFD"), n
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	mem, e := s.reserve(p, 2*maxStdinBytes)
	if e != nil {
		writeError(w, e)
		return
	}
	defer mem.release()
	var req StdinRequest
	if !s.readJSON(w, r, &req, func() *Error {
		if len(req.Data) > maxStdinBytes {
			return badField("data", "at most %d bytes per call", maxStdinBytes)
		}
		return nil
	}) {
		return
	}
	c, ok := s.openProcessCall(w, r, p)
	if !ok {
		return
	}
	defer c.end()
	rep, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpStdin, Config: runwrap.Config{ID: c.pid}, Data: []byte(req.Data), EOF: req.EOF})
	if ok {
		writeJSON(w, http.StatusOK, c.mask.process(viewOfProcess(rep.Process)))
	}
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	var req SignalRequest
	if !s.readJSON(w, r, &req, func() *Error {
		req.Signal = strings.ToUpper(req.Signal)
		if !strings.HasPrefix(req.Signal, "SIG") {
			req.Signal = "SIG" + req.Signal
		}
		if !allowedSignals[req.Signal] {
			return badField("signal", "one of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGKILL, SIGSTOP, SIGCONT")
		}
		return nil
	}) {
		return
	}
	c, ok := s.openProcessCall(w, r, p)
	if !ok {
		return
	}
	defer c.end()
	rep, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpSignal, Config: runwrap.Config{ID: c.pid}, Signal: req.Signal})
	if ok {
		writeJSON(w, http.StatusOK, c.mask.process(viewOfProcess(rep.Process)))
	}
}

// killProcess kills the process's tree (SIGTERM, grace, SIGKILL) and answers once it has ended.
func (s *Server) killProcess(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	c, ok := s.openProcessCall(w, r, p)
	if !ok {
		return
	}
	defer c.end()
	if _, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpKill, Config: runwrap.Config{ID: c.pid}}); !ok {
		return
	}
	rep, ok := s.control(w, r, c, runwrap.Request{Op: runwrap.OpStatus, Config: runwrap.Config{ID: c.pid}, Wait: runwrap.DefaultGrace + 5*time.Second})
	if ok {
		writeJSON(w, http.StatusOK, c.mask.process(viewOfProcess(rep.Process)))
	}
}

// processError maps an engine error of a process call: the supervisor's refusals are the caller's (409).
func (s *Server) processError(err error, ns string) *Error {
	if budget := (*Error)(nil); errors.As(err, &budget) {
		return budget // the memory budget refused to hold PID 1's reply
	}
	if errors.Is(err, podexec.ErrSupervisor) {
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: strings.TrimPrefix(err.Error(), podexec.ErrSupervisor.Error()+": ")}
	}
	return s.execError(err, ns)
}

// queryInt parses an optional integer query parameter within [lo, hi]; empty is 0.
func queryInt(v, name string, lo, hi int64) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badField(name, "must be an integer between %d and %d", lo, hi)
	}
	return n, nil
}
