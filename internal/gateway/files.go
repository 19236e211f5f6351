package gateway

// Files move over exec with stdin/stdout: the image runs no daemon. Until the wrapper offers a built-in file
// operation, each transfer runs a few standard tools as plain argv (no shell, so no quoting of user paths):
//
//	GET: realpath FILE   then  wc -c FILE  then  base64 FILE   (output is escaped UTF-8, so bytes travel as
//	     base64; the size comes first so that the answer has a Content-Length or a clean 413)
//	PUT: realpath DIR (mkdir -p DIR first if it is missing)  then  dd of=DIR/.tmp-RANDOM  then
//	     mv -f -T TMP DIR/NAME   (atomic rename)
//	MCP read_file: realpath FILE  then  wc -c FILE  then  head -c N FILE   (only the start it shows)
//
// Neither direction holds the file: an upload streams the request body into dd's stdin, a download decodes
// base64 from the exec stream straight into the response. A download that breaks after its first byte cannot
// change its status any more; the connection is then cut, so the client sees fewer bytes than Content-Length
// (or no last chunk, when masking leaves the length open: an error in every HTTP client), never a short file
// that looks whole. The sandbox's scoped secrets are masked in what a download returns (masker.go).
//
// A relative path is relative to the working directory; an absolute one may be anywhere. The tools run as the
// sandbox's user inside the sandbox, so a path reaches only what that user may read or write anyway:
// confining it would protect nothing. The write stays symlink-safe: realpath resolves the directory, the data
// goes to a new temporary file there, and rename(2) replaces a symlink at the name rather than following it.
// The image needs GNU coreutils or BusyBox (realpath, mkdir, wc, base64, head, dd, mv with -T, rm).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/podexec"
)

const (
	fileOpTimeout   = 5 * time.Minute
	CodeSandboxLost = "sandbox_lost"
	CodeImageTools  = "image_unsupported"
)

// toolResult is what one helper command did, with stdout kept whole (up to a limit).
type toolResult struct {
	stdout   []byte
	stderr   string
	exitCode int
}

// runTool runs argv in the sandbox and returns all of its stdout (at most limit bytes, else 413).
func (s *Server) runTool(ctx context.Context, sb *airlockv1.Sandbox, argv []string, stdin io.Reader, limit int64) (*toolResult, *Error) {
	var out bytes.Buffer
	res, e := s.streamTool(ctx, sb, argv, stdin, limit, func(b []byte) error {
		if int64(out.Len()+len(b)) > limit {
			return errTooBig
		}
		out.Write(b)
		return nil
	})
	if e != nil {
		return nil, e
	}
	return &toolResult{stdout: out.Bytes(), stderr: res.Stderr, exitCode: res.ExitCode}, nil
}

// streamTool runs argv in the sandbox, passing its stdout (at most limit bytes, else 413) to onStdout.
func (s *Server) streamTool(ctx context.Context, sb *airlockv1.Sandbox, argv []string, stdin io.Reader, limit int64, onStdout func([]byte) error) (*podexec.Result, *Error) {
	var consumerErr error
	req := s.target(sb)
	req.Argv, req.Cwd, req.StdinReader, req.Timeout = argv, workingDir(sb), stdin, fileOpTimeout
	req.KeepBytes, req.KillAfterOutputBytes = podexec.MinKeepBytes, limit+64<<10
	res, err := s.opts.Engine.Stream(ctx, req, func(c podexec.Chunk) error {
		if c.Stream != "stdout" {
			return nil
		}
		consumerErr = onStdout(c.Raw)
		return consumerErr
	})
	switch {
	case errors.Is(consumerErr, errTooBig) || (res != nil && res.Outcome == podexec.OutcomeOutputLimit):
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("file is larger than the limit of %d bytes", s.opts.MaxFileBytes)}
	case consumerErr != nil:
		return nil, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer did not complete: " + consumerErr.Error(), cause: consumerErr}
	case err != nil && res == nil:
		return nil, s.execError(err, sb.Namespace)
	case err != nil || res.Outcome != podexec.OutcomeExited:
		return nil, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer did not complete: " + string(res.Outcome) + " " + res.Detail}
	case res.ExitCode == 127 || res.ExitCode == 126:
		return nil, &Error{Status: http.StatusConflict, Code: CodeImageTools, Message: fmt.Sprintf("the sandbox image cannot run %q, which file transfer needs (GNU coreutils or BusyBox)", argv[0])}
	}
	return res, nil
}

var errTooBig = errors.New("output over the file size limit")

// resolveReal runs realpath on p (absolute, so no "--" is needed, which BusyBox lacks) in the sandbox: the path
// with every symlink resolved (404 if it is missing).
func (s *Server) resolveReal(ctx context.Context, sb *airlockv1.Sandbox, p string) (string, *Error) {
	tr, e := s.runTool(ctx, sb, []string{"realpath", p}, nil, maxPathLen+1)
	if e != nil {
		return "", e
	}
	if tr.exitCode != 0 {
		return "", &Error{Status: http.StatusNotFound, Code: CodeNotFound, Field: "path", Message: "path: " + p + " does not exist"}
	}
	real := strings.TrimSuffix(string(tr.stdout), "\n")
	if !strings.HasPrefix(real, "/") || strings.Contains(real, "\n") {
		return "", &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "unexpected realpath output in the sandbox"}
	}
	return path.Clean(real), nil
}

// pathQuery is the required ?path= of a file call.
func pathQuery(r *http.Request) (string, *Error) {
	q := r.URL.Query()
	if !q.Has("path") {
		return "", badField("path", "query parameter is required")
	}
	return q.Get("path"), nil
}

func (s *Server) tooLarge() *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("file is larger than the limit of %d bytes", s.opts.MaxFileBytes)}
}

// handleGetFile answers a download. Once its first byte is out, a failure can only cut the connection.
func (s *Server) handleGetFile(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	path, e := pathQuery(r)
	if e != nil {
		writeError(w, e)
		return
	}
	mem, _ := s.reserve(p, 0) // the service sizes it
	defer mem.release()
	sink := &httpDownload{w: w}
	e = s.downloadFile(r.Context(), p, r.PathValue("id"), path, mem, sink, deadlineHooks(w))
	switch {
	case e == nil:
	case !sink.started:
		writeError(w, e)
	default:
		// Too late for a status: cut the connection so that the body is visibly short.
		s.opts.Logger.Error(e, "download broke after it started", "tenant", p.Tenant, "sandbox", r.PathValue("id"), "written", sink.written)
		panic(http.ErrAbortHandler)
	}
}

// httpDownload is a download's HTTP answer, started with its first byte.
type httpDownload struct {
	w       http.ResponseWriter
	started bool
	written int64
}

func (d *httpDownload) begin(size int64) {
	d.started = true
	d.w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		d.w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	d.w.WriteHeader(http.StatusOK)
}

func (d *httpDownload) Write(b []byte) (int, error) {
	n, err := d.w.Write(b)
	d.written += int64(n)
	if err != nil {
		return n, fmt.Errorf("writing the response: %w", err)
	}
	return n, nil
}

// fileSize runs wc -c on the resolved file.
func (s *Server) fileSize(ctx context.Context, sb *airlockv1.Sandbox, full, real string) (int64, *Error) {
	tr, e := s.runTool(ctx, sb, []string{"wc", "-c", real}, nil, 2*maxPathLen+32)
	if e != nil {
		return 0, e
	}
	if tr.exitCode != 0 {
		return 0, toolFailure("read", full, tr.stderr)
	}
	f := strings.Fields(string(tr.stdout))
	if len(f) == 0 {
		return 0, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "unexpected wc output in the sandbox"}
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 0 {
		return 0, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "unexpected wc output in the sandbox"}
	}
	return n, nil
}

// b64Decoder decodes base64 (with line breaks) as it arrives and writes the bytes to out, calling begin once
// before the first of them; they must add up to size.
type b64Decoder struct {
	out     io.Writer
	begin   func()
	begun   bool
	size    int64
	written int64
	pending []byte // base64 characters not yet decoded (fewer than 4 after each write)
	buf     []byte
}

var errFileChanged = errors.New("the file changed size during the download")

func (d *b64Decoder) write(b []byte) error {
	for _, c := range b {
		if c != '\n' && c != '\r' {
			d.pending = append(d.pending, c)
		}
	}
	n := len(d.pending) / 4 * 4
	if n == 0 {
		return nil
	}
	d.buf = slices.Grow(d.buf[:0], base64.StdEncoding.DecodedLen(n))[:base64.StdEncoding.DecodedLen(n)]
	m, err := base64.StdEncoding.Decode(d.buf, d.pending[:n])
	if err != nil {
		return fmt.Errorf("file transfer was corrupted: %w", err)
	}
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return d.emit(d.buf[:m])
}

func (d *b64Decoder) emit(b []byte) error {
	if d.written+int64(len(b)) > d.size {
		return errFileChanged
	}
	d.start()
	d.written += int64(len(b))
	_, err := d.out.Write(b)
	return err
}

func (d *b64Decoder) start() {
	if !d.begun {
		d.begun = true
		d.begin()
	}
}

// finish checks that the whole file arrived (an empty file begins here).
func (d *b64Decoder) finish() *Error {
	switch {
	case len(d.pending) != 0:
		return &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer was corrupted"}
	case d.written != d.size:
		return &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: errFileChanged.Error() + "; retry"}
	}
	d.start()
	return nil
}

// countingReader counts what the upload body gave and keeps its error: client-go ends the command's stdin
// on a read error as on EOF, so the result alone cannot tell a short body from a whole one.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	return n, err
}

func (s *Server) handlePutFile(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	path, e := pathQuery(r)
	if e != nil {
		writeError(w, e)
		return
	}
	mem, _ := s.reserve(p, 0) // the service sizes it
	defer mem.release()
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxFileBytes)
	out, e := s.writeFile(r.Context(), p, r.PathValue("id"), path, body, r.ContentLength, mem, deadlineHooks(w))
	answer(w, http.StatusOK, out, e)
}

// upload writes body to full: into a new temporary file next to it, then renamed over it. It returns the bytes
// written.
func (s *Server) upload(ctx context.Context, sb *airlockv1.Sandbox, full string, body io.Reader) (int64, *Error) {
	if full == path.Clean(workingDir(sb)) || full == "/" {
		return 0, badField("path", "names a directory; give a file path")
	}
	dir, name := path.Split(full)
	realDir, e := s.uploadDir(ctx, sb, path.Clean(dir))
	if e != nil {
		return 0, e
	}
	tmp := path.Join(realDir, ".airlock-upload-"+randomHex())
	in := &countingReader{r: body}
	tr, e := s.runTool(ctx, sb, []string{"dd", "of=" + tmp, "bs=65536"}, in, 1024)
	if in.err != nil {
		e = uploadError(in.err)
	}
	if e == nil && tr.exitCode != 0 {
		e = toolFailure("write", full, tr.stderr)
	}
	if e == nil {
		tr, e = s.runTool(ctx, sb, []string{"mv", "-f", "-T", tmp, path.Join(realDir, name)}, nil, 1024)
		if e == nil && tr.exitCode != 0 {
			e = toolFailure("replace", full, tr.stderr)
		}
	}
	if e != nil {
		// Best effort: do not leave the temporary file behind. Detached from the request, which may be gone.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.runTool(ctx, sb, []string{"rm", "-f", tmp}, nil, 1024)
		return 0, e
	}
	return in.n, nil
}

// uploadDir resolves the directory an upload goes to, creating it (and its parents) if it is missing.
func (s *Server) uploadDir(ctx context.Context, sb *airlockv1.Sandbox, dir string) (string, *Error) {
	// "dir/." must exist whole: GNU realpath accepts a missing last component, which would skip the mkdir.
	real, e := s.resolveReal(ctx, sb, path.Join(dir, ".")+"/.")
	if e == nil || e.Status != http.StatusNotFound {
		return real, e
	}
	tr, e := s.runTool(ctx, sb, []string{"mkdir", "-p", dir}, nil, 1024)
	if e != nil {
		return "", e
	}
	if tr.exitCode != 0 {
		return "", toolFailure("create the directory", dir, tr.stderr)
	}
	return s.resolveReal(ctx, sb, dir)
}

// uploadError maps a failure to read the upload body.
func uploadError(err error) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("file is larger than the limit of %d bytes", mbe.Limit)}
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: "body: the upload did not arrive whole: " + err.Error() + "; nothing was written"}
}

// toolFailure maps a failed helper's stderr to a status.
func toolFailure(op, p, stderr string) *Error {
	msg := strings.TrimSpace(stderr)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	switch {
	case strings.Contains(msg, "Is a directory"), strings.Contains(msg, "Not a directory"):
		return badField("path", "%s: is a directory or under a non-directory", p)
	case strings.Contains(msg, "No such file"):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Field: "path", Message: "path: " + p + " does not exist"}
	case strings.Contains(msg, "Permission denied"), strings.Contains(msg, "Read-only"):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Field: "path", Message: "path: cannot " + op + " " + p + ": " + msg}
	case strings.Contains(msg, "No space"), strings.Contains(msg, "Disk quota"):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: "the sandbox's disk is full"}
	}
	return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "cannot " + op + " " + p + ": " + msg}
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
