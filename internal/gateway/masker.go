package gateway

// Scoped secrets (secrets.go) are masked wherever sandbox-derived bytes leave the gateway, each value replaced by
// [masked:NAME]: a command's output, inline (result), streamed (chunk, flush) or read back from a background
// process's files (window); its detail and the gateway's error messages (error); file downloads (stream); and
// MCP's read_file (token). A value the gateway cuts (at the head/tail truncation marker, or at the end of what
// read_file shows) has each of its pieces masked, however short: a piece is secret material.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// masker replaces a sandbox's secret values in a command's output with [masked:NAME]. For streamed output it
// holds back, per stream, the bytes that could be the start of a value split across chunks.
type masker struct {
	names, values []string
	hold          int
	pending       map[string]string
}

// maskerFor is the sandbox's masker, nil (no masking) when it has no secrets.
func (s *Server) maskerFor(ctx context.Context, sb *airlockv1.Sandbox) *masker {
	secrets, _ := s.sandboxSecrets(ctx, sb)
	m := &masker{pending: map[string]string{}}
	for _, k := range sortedKeys(secrets) {
		if v := secrets[k]; len(v) >= minMaskedSecret {
			m.names, m.values = append(m.names, k), append(m.values, v)
			m.hold = max(m.hold, len(v)-1)
		}
	}
	if len(m.values) == 0 {
		return nil
	}
	return m
}

func (m *masker) mask(s string) string {
	if m == nil {
		return s
	}
	for i, v := range m.values {
		s = strings.ReplaceAll(s, v, "[masked:"+m.names[i]+"]")
	}
	return s
}

// result masks a finished command's inline output and detail.
func (m *masker) result(res *podexec.Result) {
	if m == nil || res == nil {
		return
	}
	res.Stdout = m.truncated(res.Stdout, res.Truncation.Stdout)
	res.Stderr = m.truncated(res.Stderr, res.Truncation.Stderr)
	res.Detail = m.mask(res.Detail)
}

// process masks what a background process's view quotes from the sandbox: its detail and its command, as
// PID 1 reports them.
func (m *masker) process(v ProcessView) ProcessView {
	if m == nil {
		return v
	}
	v.Detail = m.mask(v.Detail)
	cmd := make([]string, len(v.Command))
	for i, a := range v.Command {
		cmd[i] = m.mask(a)
	}
	v.Command = cmd
	return v
}

// error masks an error's message, which may quote what a command or the sandbox said.
func (m *masker) error(e *Error) *Error {
	if m != nil && e != nil {
		e.Message = m.mask(e.Message)
	}
	return e
}

// truncated masks one stream's inline text. A truncated stream is head + marker + tail (exec's capture): a value
// the marker cut shows as a start at the end of the head and an end at the start of the tail, both masked. Every
// text that reads like the marker is treated as one (the command may print its like): masking too much there
// costs a few characters, too little would show a piece of a value.
func (m *masker) truncated(text string, t podexec.StreamTruncation) string {
	if m == nil || !t.Truncated {
		return m.mask(text)
	}
	prefix := fmt.Sprintf("\n[airlock: %d bytes omitted; ", t.OmittedBytes)
	var b strings.Builder
	afterCut := false
	for {
		i := strings.Index(text, prefix)
		j := -1
		if i >= 0 {
			j = strings.Index(text[i+len(prefix):], "]\n")
		}
		if j < 0 {
			b.WriteString(m.segment(text, afterCut, false))
			return b.String()
		}
		end := i + len(prefix) + j + len("]\n")
		b.WriteString(m.segment(text[:i], afterCut, true))
		b.WriteString(text[i:end])
		text, afterCut = text[end:], true
	}
}

// segment masks seg, a piece of output that follows a cut (afterCut) or precedes one (beforeCut): a start of seg
// that ends a value, and an end of seg that starts one, are masked besides whole values.
func (m *masker) segment(seg string, afterCut, beforeCut bool) string {
	if seg == "" {
		return ""
	}
	lead, leadName := 0, ""
	if afterCut && m.matchAt([]byte(seg), 0) < 0 {
		lead, leadName = m.valueEndAt(seg)
	}
	trail, trailName := 0, ""
	if beforeCut {
		trail, trailName = m.valueStartAt(seg[lead:])
	}
	var b strings.Builder
	if lead > 0 {
		b.WriteString("[masked:" + leadName + "]")
	}
	b.WriteString(m.mask(seg[lead : len(seg)-trail]))
	if trail > 0 {
		b.WriteString("[masked:" + trailName + "]")
	}
	return b.String()
}

// valueEndAt is the length of the longest proper end of a value that s starts with (0 if none), and its name.
func (m *masker) valueEndAt(s string) (int, string) {
	n, name := 0, ""
	for i, v := range m.values {
		for k := 1; k < len(v); k++ {
			if len(v)-k > n && strings.HasPrefix(s, v[k:]) {
				n, name = len(v)-k, m.names[i]
				break
			}
		}
	}
	return n, name
}

// valueStartAt is the length of the longest proper start of a value that s ends with (0 if none), and its name.
func (m *masker) valueStartAt(s string) (int, string) {
	n, name := 0, ""
	for i, v := range m.values {
		for k := len(v) - 1; k > n; k-- {
			if strings.HasSuffix(s, v[:k]) {
				n, name = k, m.names[i]
				break
			}
		}
	}
	return n, name
}

// chunk returns what of a streamed chunk may be sent now, masked; the rest waits for the next chunk or flush.
func (m *masker) chunk(c podexec.Chunk) []podexec.Chunk {
	if m == nil {
		return []podexec.Chunk{c}
	}
	buf := m.pending[c.Stream] + c.Data
	cut := max(len(buf)-m.hold, 0)
	// No value may straddle the cut: move it to the start of any that would, until none does.
	for moved := true; moved; {
		moved = false
		for _, v := range m.values {
			for i := max(cut-len(v)+1, 0); i < cut; i++ {
				if strings.HasPrefix(buf[i:], v) {
					cut, moved = i, true
					break
				}
			}
		}
	}
	for cut > 0 && cut < len(buf) && !utf8.RuneStart(buf[cut]) {
		cut--
	}
	m.pending[c.Stream] = buf[cut:]
	if cut == 0 {
		return nil
	}
	return []podexec.Chunk{{Stream: c.Stream, Data: m.mask(buf[:cut])}}
}

// flush returns the held-back output, masked, at the end of the command.
func (m *masker) flush() []podexec.Chunk {
	if m == nil {
		return nil
	}
	var out []podexec.Chunk
	for _, stream := range []string{"stdout", "stderr"} {
		if p := m.pending[stream]; p != "" {
			out = append(out, podexec.Chunk{Stream: stream, Data: m.mask(p)})
			delete(m.pending, stream)
		}
	}
	return out
}

// stream masks the bytes written to it on their way to w (a file download). Bytes that may begin a value are
// held back until the next write tells, or Close; at most hold bytes are held at any time.
func (m *masker) stream(w io.Writer) *maskingWriter {
	return &maskingWriter{m: m, w: w}
}

type maskingWriter struct {
	m       *masker
	w       io.Writer
	pending []byte
	out     []byte
}

func (mw *maskingWriter) Write(b []byte) (int, error) {
	if mw.m == nil {
		return mw.w.Write(b)
	}
	buf := append(mw.pending, b...)
	mw.out = mw.out[:0]
	i := 0
	for i < len(buf) {
		if k := mw.m.matchAt(buf, i); k >= 0 {
			mw.out = append(mw.out, "[masked:"+mw.m.names[k]+"]"...)
			i += len(mw.m.values[k])
			continue
		}
		if mw.m.unfinishedAt(buf, i) {
			break
		}
		mw.out = append(mw.out, buf[i])
		i++
	}
	mw.pending = append(mw.pending[:0], buf[i:]...)
	if _, err := mw.w.Write(mw.out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close writes what is held back: the stream ended, so it is no value.
func (mw *maskingWriter) Close() error {
	if len(mw.pending) == 0 {
		return nil
	}
	_, err := mw.w.Write(mw.pending)
	mw.pending = nil
	return err
}

// runeStartBefore is where the character that win[pos-1] belongs to starts (pos when win[pos-1] is invalid).
func runeStartBefore(win []byte, pos int) int {
	for i := pos - 1; i >= max(pos-utf8.UTFMax, 0); i-- {
		if utf8.RuneStart(win[i]) {
			return i
		}
	}
	return pos
}

// window masks one read of a background process's output file. win holds the file's bytes around the asked
// range win[start:end], up to m.hold bytes either side where the file has them. A value crossing start is
// shown masked, one crossing end is taken whole, and when more may still be written (more), a possible start
// of a value at the end of win is left for a later read: no read, at any offset or size, shows part of a
// value. It returns the text and the index in win where the next read starts.
func (m *masker) window(win []byte, start, end int, more bool) (string, int) {
	var b strings.Builder
	pos := start
	for i := max(start-m.hold, 0); i < start; i++ {
		if k := m.matchAt(win, i); k >= 0 && i+len(m.values[k]) > start {
			b.WriteString("[masked:" + m.names[k] + "]")
			pos = i + len(m.values[k])
			break
		}
	}
	seg := pos
	for pos < end {
		if k := m.matchAt(win, pos); k >= 0 {
			b.WriteString(strings.ToValidUTF8(string(win[seg:pos]), "\uFFFD"))
			b.WriteString("[masked:" + m.names[k] + "]")
			pos += len(m.values[k])
			seg = pos
			continue
		}
		if more && m.unfinishedAt(win, pos) {
			break
		}
		pos++
	}
	// A character cut at the end is taken whole when win holds the rest, so that even 1-byte reads move on.
	if r := runeStartBefore(win, pos); r >= seg && r < pos && utf8.FullRune(win[r:]) {
		_, size := utf8.DecodeRune(win[r:])
		pos = r + size
	}
	text, n := textOf(win[seg:pos], more || pos < len(win))
	b.WriteString(text)
	return b.String(), seg + n
}

// matchAt is the index of the longest value at win[i:], or -1.
func (m *masker) matchAt(win []byte, i int) int {
	k := -1
	for j, v := range m.values {
		if win[i] == v[0] && bytes.HasPrefix(win[i:], []byte(v)) && (k < 0 || len(v) > len(m.values[k])) {
			k = j
		}
	}
	return k
}

// token is FitText's view of masking: the mask of a value at b[i:] and the value's length, or 0.
func (m *masker) token(b []byte, i int) (string, int) {
	k := m.matchAt(b, i)
	if k < 0 {
		return "", 0
	}
	return "[masked:" + m.names[k] + "]", len(m.values[k])
}

// unfinishedAt says whether win[i:] is the start of a value that win cuts short.
func (m *masker) unfinishedAt(win []byte, i int) bool {
	for _, v := range m.values {
		if len(win)-i < len(v) && win[i] == v[0] && strings.HasPrefix(v, string(win[i:])) {
			return true
		}
	}
	return false
}
