package gateway

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/mcpserver"
)

// FileWritten is the answer to an upload.
type FileWritten struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// fileSink receives a download: begin once, before the first byte, with the file's size, or -1 when masking
// may change it.
type fileSink interface {
	begin(size int64)
	io.Writer
}

// writeFile replaces the file at path with body (size bytes, -1 if unknown), atomically. The slot and the
// memory come first: a body is read only by a call that may run.
func (s *Server) writeFile(ctx context.Context, p auth.Principal, id, path string, body io.Reader, size int64, mem *reservation, hooks callHooks) (*FileWritten, *Error) {
	sb, full, release, e := s.admitFile(ctx, p, id, path, mem, fileChunk)
	if e != nil {
		return nil, e
	}
	defer release()
	if size > s.opts.MaxFileBytes {
		return nil, s.tooLarge()
	}
	// An upload may take as long as the transfer may, past the server's timeout for ordinary bodies.
	hooks.admit(2 * fileOpTimeout)
	n, e := s.upload(ctx, sb, full, body)
	if e != nil {
		return nil, s.maskerFor(ctx, sb).error(e)
	}
	return &FileWritten{Path: full, Bytes: n}, nil
}

// downloadFile streams the file at path to sink, its scoped secrets masked.
func (s *Server) downloadFile(ctx context.Context, p auth.Principal, id, path string, mem *reservation, sink fileSink, hooks callHooks) *Error {
	sb, full, release, e := s.admitFile(ctx, p, id, path, mem, fileChunk)
	if e != nil {
		return e
	}
	defer release()
	hooks.admit(3 * fileOpTimeout)
	mask := s.maskerFor(ctx, sb)
	return mask.error(s.download(ctx, sb, full, mask, sink))
}

func (s *Server) download(ctx context.Context, sb *airlockv1.Sandbox, full string, mask *masker, sink fileSink) *Error {
	real, e := s.resolveReal(ctx, sb, full)
	if e != nil {
		return e
	}
	size, e := s.fileSize(ctx, sb, full, real)
	if e != nil {
		return e
	}
	if size > s.opts.MaxFileBytes {
		return s.tooLarge()
	}
	length := size
	if mask != nil {
		length = -1 // a masked value changes the size
	}
	out := mask.stream(sink)
	dec := &b64Decoder{out: out, size: size, begin: func() { sink.begin(length) }}
	// base64 of the size, plus line breaks every 76 characters.
	b64 := (size+2)/3*4 + size/57 + 1
	res, e := s.streamTool(ctx, sb, []string{"base64", real}, nil, b64, dec.write)
	if e == nil && res.ExitCode != 0 {
		e = toolFailure("read", full, res.Stderr)
	}
	if e == nil {
		e = dec.finish()
	}
	if e == nil {
		if err := out.Close(); err != nil {
			e = &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer did not complete: " + err.Error(), cause: err}
		}
	}
	return e
}

// readText returns the start of the text file at path that fits maxText characters of JSON (MCP's read_file),
// its scoped secrets masked. Only that start is read from the sandbox, whatever the file's size.
func (s *Server) readText(ctx context.Context, p auth.Principal, id, path string, maxText int, mem *reservation) (*mcpserver.FileText, *Error) {
	sb, full, release, e := s.admitFile(ctx, p, id, path, mem, fileChunk)
	if e != nil {
		return nil, e
	}
	defer release()
	mask := s.maskerFor(ctx, sb)
	ft, e := s.readStart(ctx, p, sb, full, path, maxText, mask, mem)
	return ft, mask.error(e)
}

func (s *Server) readStart(ctx context.Context, p auth.Principal, sb *airlockv1.Sandbox, full, path string, maxText int, mask *masker, mem *reservation) (*mcpserver.FileText, *Error) {
	// Enough bytes for maxText characters, a character cut at the end, and a secret value that starts in
	// what is shown, so that it is masked whole.
	limit := maxText + utf8.UTFMax
	var token func([]byte, int) (string, int)
	if mask != nil {
		limit += mask.hold
		token = mask.token
	}
	if e := mem.atLeast(callOverhead + fileChunk + 2*int64(limit)); e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
		return nil, e
	}
	real, e := s.resolveReal(ctx, sb, full)
	if e != nil {
		return nil, e
	}
	size, e := s.fileSize(ctx, sb, full, real)
	if e != nil {
		return nil, e
	}
	tr, e := s.runTool(ctx, sb, []string{"head", "-c", strconv.Itoa(limit), real}, nil, int64(limit))
	if e != nil {
		return nil, e
	}
	if tr.exitCode != 0 {
		return nil, toolFailure("read", full, tr.stderr)
	}
	more := len(tr.stdout) == limit || int64(len(tr.stdout)) < size
	text, n, ok := mcpserver.FitText(tr.stdout, maxText, more, token)
	if !ok {
		return nil, badField("path", "%s is not UTF-8 text (byte %d is not); look at it with run_command, e.g. xxd or base64", path, n)
	}
	return &mcpserver.FileText{Text: text, Size: max(size, int64(n)), Shown: int64(n)}, nil
}

// admitFile does what every file call does first: the caller's ready sandbox, the path resolved against its
// working directory, an exec slot, work bytes of memory and the sandbox's activity. release undoes them.
func (s *Server) admitFile(ctx context.Context, p auth.Principal, id, path string, mem *reservation, work int64) (*airlockv1.Sandbox, string, func(), *Error) {
	if e := checkSandboxID(id); e != nil {
		return nil, "", nil, e
	}
	sb, e := s.readySandbox(ctx, p, id)
	if e != nil {
		return nil, "", nil, e
	}
	full, err := ResolvePath(workingDir(sb), path)
	if err != nil {
		return nil, "", nil, badField("path", "%v", err)
	}
	release, e := s.acquireExec(p)
	if e != nil {
		return nil, "", nil, e
	}
	if e := mem.atLeast(callOverhead + work); e != nil {
		s.metrics.rejected.WithLabelValues(p.Tenant, e.Code).Inc()
		release()
		return nil, "", nil, e
	}
	busy := s.opts.Activity.Begin(sb.Namespace, sb.Name)
	return sb, full, func() { busy(); release() }, nil
}
