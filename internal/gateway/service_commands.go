package gateway

import (
	"context"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

// runCommand runs req (a foreground command) in the caller's sandbox id and returns its result, secrets masked.
// mem is the call's reservation: it grows to the command's worst case. A result cut short (the caller left, the
// stream broke) is still a result; an *Error means the command did not run or nothing of it came back.
func (s *Server) runCommand(ctx context.Context, p auth.Principal, id string, req *ExecRequest, mem *reservation, hooks callHooks) (*ExecResponse, *Error) {
	if e := checkSandboxID(id); e != nil {
		return nil, e
	}
	if e := req.validate(s.opts.MaxExecTimeout.Milliseconds()); e != nil {
		return nil, e
	}
	sb, e := s.readySandbox(ctx, p, id)
	if e != nil {
		return nil, e
	}
	release, e := s.acquireExec(p)
	if e != nil {
		return nil, e
	}
	defer release()
	defer s.opts.Activity.Begin(sb.Namespace, sb.Name)()

	xr := s.execRequest(ctx, sb, req)
	stdin := 0
	if req.Stdin != nil {
		stdin = len(*req.Stdin)
	}
	if e := mem.atLeast(execCost(xr.KeepBytes, stdin)); e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
		return nil, e
	}
	hooks.admit(xr.Timeout + execDeadlineSlack)
	if s.opts.LogCommands {
		s.opts.Logger.Info("exec", "tenant", p.Tenant, "sandbox", id, "argv", xr.Argv, "shell", xr.Shell)
	}
	mask := s.maskerFor(ctx, sb)
	res, err := s.execute(ctx, xr, mask, hooks.chunk)
	if err != nil && ctx.Err() == nil {
		s.opts.Logger.Error(err, "exec", "tenant", p.Tenant, "sandbox", id)
	}
	if res == nil {
		return nil, mask.error(s.execError(err, sb.Namespace))
	}
	s.observeExec(p, res)
	s.audit(sb, reasonExec, "Exec", "command by key %s ended: %s (exit %d) after %dms",
		p.KeyID, res.Outcome, res.ExitCode, res.Duration.Milliseconds())
	mask.result(res)
	resp := responseOf(res, err)
	resp.Detail = mask.mask(resp.Detail) // the call's own error may quote the sandbox
	return &resp, nil
}

// execute runs xr, passing its output to chunk (if set) masked as it arrives.
func (s *Server) execute(ctx context.Context, xr podexec.Request, mask *masker, chunk func(ChunkLine) error) (*podexec.Result, error) {
	if chunk == nil {
		return s.opts.Engine.Stream(ctx, xr, nil)
	}
	send := func(cs []podexec.Chunk) error {
		for _, c := range cs {
			if err := chunk(ChunkLine{Stream: c.Stream, Data: c.Data}); err != nil {
				return err
			}
		}
		return nil
	}
	res, err := s.opts.Engine.Stream(ctx, xr, func(c podexec.Chunk) error { return send(mask.chunk(c)) })
	_ = send(mask.flush())
	return res, err
}
