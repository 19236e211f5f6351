package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// Files moves files in and out of a sandbox. A relative path is relative to the working directory; an
// absolute one may be anywhere the sandbox user may write (the transfer runs as that user).
type Files struct{ s *Sandbox }

// FileInfo is one entry of a directory listing.
type FileInfo struct {
	Name string `json:"name"`
	// Path is the directory given to List joined with Name.
	Path  string `json:"path"`
	IsDir bool   `json:"is_dir"`
	// Type is find's %y: f (file), d (directory), l (symlink), ...
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// Write replaces the file at p with data, atomically; parent directories are created.
func (f *Files) Write(ctx context.Context, p string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	resp, err := f.s.c.do(ctx, request{method: "PUT", path: f.s.path("/files"), query: url.Values{"path": {p}},
		body: data, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Read returns the file's bytes. A transfer cut short is an error, never a short file.
func (f *Files) Read(ctx context.Context, p string) ([]byte, error) {
	resp, err := f.s.c.do(ctx, request{method: "GET", path: f.s.path("/files"), query: url.Values{"path": {p}}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("airlock: reading %s: %w", p, err)
	}
	return data, nil
}

// ReadText is Read as a string.
func (f *Files) ReadText(ctx context.Context, p string) (string, error) {
	b, err := f.Read(ctx, p)
	return string(b), err
}

// fileOp runs a small file command (no shell) and fails unless it ran to an exit.
func (f *Files) fileOp(ctx context.Context, argv []string) (*ExecResult, error) {
	res, err := f.s.ExecArgv(ctx, argv, ExecOptions{})
	if err != nil {
		return nil, err
	}
	if res.Outcome != "exited" {
		return nil, &Error{Status: http.StatusBadGateway, Code: "sandbox_lost", Message: argv[0] + " did not complete: " + res.Outcome + " " + res.Detail}
	}
	return res, nil
}

// List returns the entries of directory p (not recursive). Names are as the gateway renders output: valid
// UTF-8, other bytes as \xNN.
func (f *Files) List(ctx context.Context, p string) ([]FileInfo, error) {
	res, err := f.fileOp(ctx, []string{"find", p, "-mindepth", "1", "-maxdepth", "1", "-printf", `%y\t%s\t%f\0`})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fileError(p, res)
	}
	var out []FileInfo
	for _, rec := range strings.Split(strings.TrimSuffix(res.Stdout, "\x00"), "\x00") {
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			continue
		}
		size, _ := strconv.ParseInt(parts[1], 10, 64)
		out = append(out, FileInfo{Name: parts[2], Path: path.Join(p, parts[2]), Type: parts[0], IsDir: parts[0] == "d", Size: size})
	}
	return out, nil
}

// Exists reports whether p exists (following symlinks).
func (f *Files) Exists(ctx context.Context, p string) (bool, error) {
	res, err := f.fileOp(ctx, []string{"test", "-e", p})
	if err != nil {
		return false, err
	}
	return res.ExitCode == 0, nil
}

// Remove deletes p, a directory with everything in it. A path that does not exist is not an error.
func (f *Files) Remove(ctx context.Context, p string) error {
	res, err := f.fileOp(ctx, []string{"rm", "-rf", "--", p})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fileError(p, res)
	}
	return nil
}

func fileError(p string, res *ExecResult) *Error {
	msg := strings.TrimSpace(res.Stderr)
	if strings.Contains(msg, "No such file") {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Field: "path", Message: "path: " + p + " does not exist"}
	}
	return &Error{Status: http.StatusConflict, Code: "conflict", Field: "path", Message: fmt.Sprintf("path: %s: exit %d: %s", p, res.ExitCode, msg)}
}
