package gateway

// Files move over exec with stdin/stdout: the image runs no daemon. Until the wrapper offers a built-in file
// operation, each transfer runs a few standard tools as plain argv (no shell, so no quoting of user paths):
//
//	GET: realpath ROOT FILE   then  base64 FILE            (output is escaped UTF-8, so bytes travel as base64)
//	PUT: realpath ROOT DIR    then  dd of=DIR/.tmp-RANDOM  then  mv -f -T TMP DIR/NAME   (atomic rename)
//
// The path is confined twice: lexically here (ConfinePath) and after the sandbox resolves every symlink
// (realpath), whose answer must still be inside the working directory. rename(2) replaces a symlink at the
// destination rather than following it. What remains is a window between the realpath and the
// read/write in which code in the sandbox could swap a directory for a symlink; it can only redirect its own
// sandbox's files, which that code can read and write anyway. The image needs GNU coreutils or BusyBox
// (realpath, base64, dd, mv with -T, rm).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/exec"
	"airlock.dev/airlock/internal/gateway/auth"
	"airlock.dev/airlock/internal/sandbox"
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
func (s *Server) runTool(ctx context.Context, sb *airlockv1.Sandbox, argv []string, stdin []byte, limit int64) (*toolResult, *Error) {
	var out bytes.Buffer
	tooBig := false
	req := exec.Request{
		Namespace: sb.Namespace, Pod: podName(sb), Container: sandbox.ContainerName,
		Argv: argv, Cwd: workingDir(sb), Stdin: stdin, Timeout: fileOpTimeout,
		KeepBytes: exec.MinKeepBytes, MaxOutputBytes: limit + 64<<10,
	}
	res, err := s.opts.Engine.Stream(ctx, req, func(c exec.Chunk) error {
		if c.Stream != "stdout" {
			return nil
		}
		if int64(out.Len()+len(c.Data)) > limit {
			tooBig = true
			return errTooBig
		}
		out.WriteString(c.Data)
		return nil
	})
	if tooBig || (res != nil && res.Outcome == exec.OutcomeOutputLimit) {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("file is larger than the limit of %d bytes", s.opts.MaxFileBytes)}
	}
	if err != nil && res == nil {
		return nil, execError(err)
	}
	if err != nil || res.Outcome != exec.OutcomeExited {
		return nil, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer did not complete: " + string(res.Outcome) + " " + res.Detail}
	}
	if res.ExitCode == 127 || res.ExitCode == 126 {
		return nil, &Error{Status: http.StatusConflict, Code: CodeImageTools, Message: fmt.Sprintf("the sandbox image cannot run %q, which file transfer needs (GNU coreutils or BusyBox)", argv[0])}
	}
	return &toolResult{stdout: out.Bytes(), stderr: res.Stderr, exitCode: res.ExitCode}, nil
}

var errTooBig = fmt.Errorf("output over the file size limit")

// resolveInside runs realpath on the root and on p and checks that p resolves inside the root.
func (s *Server) resolveInside(ctx context.Context, sb *airlockv1.Sandbox, root, p string) (string, *Error) {
	tr, e := s.runTool(ctx, sb, []string{"realpath", root, p}, nil, 2*maxPathLen+2)
	if e != nil {
		return "", e
	}
	if tr.exitCode != 0 {
		return "", &Error{Status: http.StatusNotFound, Code: CodeNotFound, Field: "path", Message: "path: " + p + " does not exist"}
	}
	lines := strings.Split(strings.TrimSuffix(string(tr.stdout), "\n"), "\n")
	if len(lines) != 2 {
		return "", &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "unexpected realpath output in the sandbox"}
	}
	realRoot, real := lines[0], lines[1]
	if !strings.HasPrefix(realRoot, "/") || !strings.HasPrefix(real, "/") || !within(path.Clean(realRoot), path.Clean(real)) {
		return "", badField("path", "resolves (through a symlink) outside the sandbox's working directory")
	}
	return path.Clean(real), nil
}

// filePath validates ?path= against the sandbox's working directory.
func filePath(r *http.Request, root string) (string, *Error) {
	q := r.URL.Query()
	if !q.Has("path") {
		return "", badField("path", "query parameter is required")
	}
	full, err := ConfinePath(root, q.Get("path"))
	if err != nil {
		return "", badField("path", "%v", err)
	}
	return full, nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	sb, full, release, e := s.fileCall(r, p)
	if e != nil {
		writeError(w, e)
		return
	}
	defer release()
	real, e := s.resolveInside(r.Context(), sb, workingDir(sb), full)
	if e != nil {
		writeError(w, e)
		return
	}
	// base64 of the limit, plus line breaks every 76 characters.
	b64 := (s.opts.MaxFileBytes+2)/3*4 + s.opts.MaxFileBytes/57 + 1
	tr, e := s.runTool(r.Context(), sb, []string{"base64", real}, nil, b64)
	if e != nil {
		writeError(w, e)
		return
	}
	if tr.exitCode != 0 {
		writeError(w, toolFailure("read", full, tr.stderr))
		return
	}
	data, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\n", "", "\r", "").Replace(string(tr.stdout)))
	if err != nil {
		writeError(w, &Error{Status: http.StatusBadGateway, Code: CodeSandboxLost, Message: "file transfer was corrupted"})
		return
	}
	if int64(len(data)) > s.opts.MaxFileBytes {
		writeError(w, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("file is larger than the limit of %d bytes", s.opts.MaxFileBytes)})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxFileBytes)
	data, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, jsonError(err))
		return
	}
	sb, full, release, e := s.fileCall(r, p)
	if e != nil {
		writeError(w, e)
		return
	}
	defer release()
	root := workingDir(sb)
	if full == path.Clean(root) {
		writeError(w, badField("path", "names the working directory itself; give a file path"))
		return
	}
	dir, name := path.Split(full)
	realDir, e := s.resolveInside(r.Context(), sb, root, path.Clean(dir))
	if e != nil {
		if e.Status == http.StatusNotFound {
			e.Message = "path: directory " + path.Clean(dir) + " does not exist; create it first (exec mkdir -p)"
		}
		writeError(w, e)
		return
	}
	tmp := path.Join(realDir, ".airlock-upload-"+randomHex())
	if data == nil {
		data = []byte{}
	}
	tr, e := s.runTool(r.Context(), sb, []string{"dd", "of=" + tmp, "bs=65536"}, data, 1024)
	if e == nil && tr.exitCode != 0 {
		e = toolFailure("write", full, tr.stderr)
	}
	if e == nil {
		tr, e = s.runTool(r.Context(), sb, []string{"mv", "-f", "-T", tmp, path.Join(realDir, name)}, nil, 1024)
		if e == nil && tr.exitCode != 0 {
			e = toolFailure("replace", full, tr.stderr)
		}
	}
	if e != nil {
		// Best effort: do not leave the temporary file behind. Detached from the request, which may be gone.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
		defer cancel()
		_, _ = s.runTool(ctx, sb, []string{"rm", "-f", tmp}, nil, 1024)
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": full, "bytes": len(data)})
}

// fileCall does what GET and PUT share: the ready sandbox, the confined path and a concurrency slot.
func (s *Server) fileCall(r *http.Request, p auth.Principal) (*airlockv1.Sandbox, string, func(), *Error) {
	id, e := sandboxID(r)
	if e != nil {
		return nil, "", nil, e
	}
	sb, e := s.readySandbox(r.Context(), p, id)
	if e != nil {
		return nil, "", nil, e
	}
	full, e := filePath(r, workingDir(sb))
	if e != nil {
		return nil, "", nil, e
	}
	release, e := s.acquireExec(p)
	if e != nil {
		return nil, "", nil, e
	}
	return sb, full, release, nil
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
