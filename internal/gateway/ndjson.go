package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"airlock.dev/airlock/internal/gateway/auth"
)

const ndjsonType = "application/x-ndjson"

// wantsNDJSON reports whether the client asked for a streamed exec.
func wantsNDJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == ndjsonType {
			return true
		}
	}
	return false
}

// ChunkLine is one streamed piece of output.
type ChunkLine struct {
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

// ndjsonWriter writes one JSON value per line and flushes it, committing status 200 on the first line. Until
// then an error can still go out as a plain error response.
type ndjsonWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	enc     *json.Encoder
	started bool
}

func newNDJSONWriter(w http.ResponseWriter) *ndjsonWriter {
	return &ndjsonWriter{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
}

func (n *ndjsonWriter) start() {
	if !n.started {
		n.started = true
		n.w.Header().Set("Content-Type", ndjsonType)
		n.w.Header().Set("X-Content-Type-Options", "nosniff")
		n.w.WriteHeader(http.StatusOK)
	}
}

func (n *ndjsonWriter) line(v any) error {
	n.start()
	// Encode appends the newline; HTML escaping is off so output reads as the command wrote it.
	if err := n.enc.Encode(v); err != nil {
		return err
	}
	return n.flush()
}

func (n *ndjsonWriter) flush() error {
	if err := n.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// result writes the result line, streamed like the plain response.
func (n *ndjsonWriter) result(resp ExecResponse) error {
	n.start()
	if err := writeExecResult(n.w, resp); err != nil {
		return err
	}
	return n.flush()
}

// streamExec runs the command, writing output lines as they come and the result last. An error after the
// first line becomes a final {"error": ...} line; a result cut short is still the last line.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, p auth.Principal, id string, req *ExecRequest, mem *reservation, hooks callHooks) {
	nw := newNDJSONWriter(w)
	nw.enc.SetEscapeHTML(false)
	hooks.chunk = func(c ChunkLine) error { return nw.line(c) }
	resp, e := s.runCommand(r.Context(), p, id, req, mem, hooks)
	switch {
	case r.Context().Err() != nil:
		// The client left; nobody to tell.
	case e == nil:
		_ = nw.result(*resp)
	case !nw.started:
		writeError(w, e)
	default:
		_ = nw.line(errorEnvelope{e})
	}
}

// writeExecResult writes resp as a JSON line without building it whole: stdout and stderr go out in pieces,
// so JSON escaping (six bytes for a control byte) costs a piece's worth of memory, not a copy of the output.
func writeExecResult(w io.Writer, resp ExecResponse) error {
	out, errOut := resp.Stdout, resp.Stderr
	resp.Stdout, resp.Stderr = "", ""
	var meta bytes.Buffer
	enc := json.NewEncoder(&meta)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		return err
	}
	b := meta.Bytes()
	// stdout and stderr are ExecResponse's first string fields, so these first matches are theirs.
	const so, se = `"stdout":"`, `"stderr":"`
	i, j := bytes.Index(b, []byte(so+`"`)), bytes.Index(b, []byte(se+`"`))
	if i < 0 || j < i {
		return errors.New("exec response: stdout and stderr fields not found")
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	_, _ = bw.Write(b[:i+len(so)])
	writeJSONStringBody(bw, out)
	_, _ = bw.Write(b[i+len(so) : j+len(se)])
	writeJSONStringBody(bw, errOut)
	_, _ = bw.Write(b[j+len(se):])
	return bw.Flush()
}

// writeJSONStringBody writes s JSON-escaped, without quotes, in pieces cut at character boundaries (escaping
// is per character, so the pieces join to the escaping of s). Errors stick in bw.
func writeJSONStringBody(bw *bufio.Writer, s string) {
	const piece = 8 << 10
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for len(s) > 0 {
		n := min(len(s), piece)
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n--
		}
		buf.Reset()
		_ = enc.Encode(s[:n]) // a string always encodes
		e := buf.Bytes()
		_, _ = bw.Write(e[1 : len(e)-2]) // without the quotes and the newline
		s = s[n:]
	}
}
