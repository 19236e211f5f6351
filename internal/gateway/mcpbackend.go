package gateway

import (
	"context"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
	"airlock.dev/airlock/pkg/client"
)

// mcpBackend is the service layer as one MCP tool call's caller sees it (mcpserver.Backend).
type mcpBackend struct {
	s    *Server
	p    auth.Principal
	call *mcpCall
}

// errCallEnded fails a tool whose POST ended before its result: nobody can receive it any more.
var errCallEnded = errors.New("the request of this call ended before its result; nothing was kept")

// mcpBackend is the backend of one tool call: its caller, from the request's token, and its POST.
func (s *Server) mcpBackend(_ context.Context, req *mcp.CallToolRequest) (mcpserver.Backend, error) {
	if req.Extra == nil {
		return nil, errors.New("an MCP tool call without its HTTP request")
	}
	p, err := mcpPrincipal(req.Extra.TokenInfo)
	if err != nil {
		return nil, err
	}
	call := s.mcpCalls.lookup(req.Extra.Header.Get(mcpCallHeader), p.Tenant)
	if call == nil {
		return nil, errCallEnded
	}
	return &mcpBackend{s: s, p: p, call: call}, nil
}

func (b *mcpBackend) Create(ctx context.Context, opts client.CreateOptions) (*client.Info, error) {
	req := CreateRequest{Template: opts.Template, Size: opts.Size, Network: opts.Network, Env: opts.Env,
		Secrets: opts.Secrets, Metadata: opts.Metadata}
	if req.Network == "off" {
		req.Network = "none"
	}
	if opts.TimeoutMinutes != 0 {
		req.TimeoutMinutes = &opts.TimeoutMinutes
	}
	if opts.IdleTimeoutMinutes != 0 {
		req.IdleTimeoutMinutes = &opts.IdleTimeoutMinutes
	}
	if opts.NoWait {
		wait := false
		req.Wait = &wait
	}
	v, e := b.s.createSandbox(ctx, b.p, &req)
	return infoOf(v, e)
}

func (b *mcpBackend) Get(ctx context.Context, id string) (*client.Info, error) {
	return infoOf(b.s.getSandbox(ctx, b.p, id))
}

func (b *mcpBackend) List(ctx context.Context) ([]client.Info, error) {
	list, e := b.s.listSandboxes(ctx, b.p)
	if e != nil {
		return nil, clientError(e)
	}
	out := make([]client.Info, 0, len(list))
	for i := range list {
		out = append(out, *clientInfo(&list[i]))
	}
	return out, nil
}

func (b *mcpBackend) Delete(ctx context.Context, id string) error {
	_, e := b.s.deleteSandbox(ctx, b.p, id)
	return clientError(e)
}

// Exec runs cmd and keeps what its result holds until the POST's answer is written.
func (b *mcpBackend) Exec(ctx context.Context, id string, cmd mcpserver.Command) (*client.ExecResult, error) {
	req := ExecRequest{Command: cmd.Shell, Argv: cmd.Argv}
	if cmd.Timeout > 0 {
		ms := cmd.Timeout.Milliseconds()
		req.TimeoutMS = &ms
	}
	mem, e := b.s.reserve(b.p, 0) // runCommand sizes it
	if e != nil {
		return nil, clientError(e)
	}
	resp, e := b.s.runCommand(ctx, b.p, id, &req, mem, callHooks{})
	if e != nil {
		mem.release()
		return nil, clientError(e)
	}
	if err := b.keep(mem, mcpResultCost(resp.Stdout, resp.Stderr, resp.Detail)); err != nil {
		return nil, err
	}
	return execResultOf(resp), nil
}

func (b *mcpBackend) WriteFile(ctx context.Context, id, path, content string) error {
	mem, e := b.s.reserve(b.p, 0) // writeFile sizes it
	if e != nil {
		return clientError(e)
	}
	defer mem.release()
	_, e = b.s.writeFile(ctx, b.p, id, path, strings.NewReader(content), int64(len(content)), mem, callHooks{})
	return clientError(e)
}

// ReadText reads the start of the file and keeps what its text holds until the POST's answer is written.
func (b *mcpBackend) ReadText(ctx context.Context, id, path string, maxText int) (*mcpserver.FileText, error) {
	mem, e := b.s.reserve(b.p, 0) // readText sizes it
	if e != nil {
		return nil, clientError(e)
	}
	ft, e := b.s.readText(ctx, b.p, id, path, maxText, mem)
	if e != nil {
		mem.release()
		return nil, clientError(e)
	}
	if err := b.keep(mem, mcpResultCost(ft.Text)); err != nil {
		return nil, err
	}
	return ft, nil
}

// keep resizes a tool's reservation to what its result holds while it is encoded, and hands it to the POST,
// which releases it once its answer is written. A POST already gone has no answer to write: the result is
// dropped and the tool fails.
func (b *mcpBackend) keep(mem *reservation, cost int64) error {
	if e := mem.resize(cost); e != nil {
		mem.release()
		b.s.metrics.rejected.WithLabelValues(b.p.Tenant, e.Code).Inc()
		return clientError(e)
	}
	if !b.call.hold(mem) {
		mem.release()
		return errCallEnded
	}
	return nil
}

// clientError is e as pkg/client reports it, so that the tools tell its kind with errors.Is; nil for nil.
func clientError(e *Error) error {
	if e == nil {
		return nil
	}
	return &client.Error{Status: e.Status, Code: e.Code, Message: e.Message, Field: e.Field, Phase: e.Phase,
		Reason: e.Reason, RetryAfter: e.RetryAfter}
}

func infoOf(v *SandboxView, e *Error) (*client.Info, error) {
	if e != nil {
		return nil, clientError(e)
	}
	return clientInfo(v), nil
}

func clientInfo(v *SandboxView) *client.Info {
	return &client.Info{ID: v.ID, Status: v.Status, Reason: v.Reason, Message: v.Message, Template: v.Template,
		Image: v.Image, Size: v.Size, Network: v.Network, Isolation: v.Isolation, TimeoutMinutes: v.TimeoutMinutes,
		MaxTimeoutMinutes: v.MaxTimeoutMinutes, WorkingDir: v.WorkingDir, CreatedAt: v.CreatedAt,
		StartedAt: v.StartedAt, ExpiresAt: v.ExpiresAt, UsageSeconds: v.UsageSeconds, Metadata: v.Metadata}
}

// execResultOf is r as pkg/client returns it: a timeout reports client.ExitTimeout.
func execResultOf(r *ExecResponse) *client.ExecResult {
	st := func(t StreamTruncation) client.StreamTruncation {
		return client.StreamTruncation{Truncated: t.Truncated, KeptBytes: int64(t.KeptBytes), OmittedBytes: t.OmittedBytes,
			FullOutputPath: t.FullOutputPath}
	}
	res := &client.ExecResult{ExitCode: r.ExitCode, DurationMS: r.DurationMS, Stdout: r.Stdout, Stderr: r.Stderr,
		Truncated: r.Truncated, Outcome: r.Outcome, Signal: r.Signal, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		Truncation:       client.Truncation{Stdout: st(r.Truncation.Stdout), Stderr: st(r.Truncation.Stderr)},
		OutputIncomplete: r.OutputIncomplete, Detail: r.Detail}
	if res.Outcome == "timeout" {
		res.ExitCode = client.ExitTimeout
	}
	return res
}
