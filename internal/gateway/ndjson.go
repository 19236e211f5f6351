package gateway

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"airlock.dev/airlock/internal/exec"
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

func (n *ndjsonWriter) line(v any) error {
	if !n.started {
		n.started = true
		n.w.Header().Set("Content-Type", ndjsonType)
		n.w.Header().Set("X-Content-Type-Options", "nosniff")
		n.w.WriteHeader(http.StatusOK)
	}
	// Encode appends the newline; HTML escaping is off so output reads as the command wrote it.
	if err := n.enc.Encode(v); err != nil {
		return err
	}
	if err := n.rc.Flush(); err != nil && err != http.ErrNotSupported {
		return err
	}
	return nil
}

// streamExec runs the command, writing output lines as they come and the result last. An error after the
// first line becomes a final {"error": ...} line.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, xr exec.Request) (*exec.Result, error) {
	nw := newNDJSONWriter(w)
	nw.enc.SetEscapeHTML(false)
	res, err := s.opts.Engine.Stream(r.Context(), xr, func(c exec.Chunk) error {
		return nw.line(ChunkLine{Stream: c.Stream, Data: c.Data})
	})
	switch {
	case err == nil:
		_ = nw.line(responseOf(res))
	case r.Context().Err() != nil:
		// The client left; nobody to tell.
	case !nw.started && res == nil:
		writeError(w, execError(err))
	default:
		e := execError(err)
		if res != nil {
			// The command ran (partially); its result is the better answer.
			_ = nw.line(responseOf(res))
		} else {
			_ = nw.line(errorEnvelope{e})
		}
	}
	return res, err
}
