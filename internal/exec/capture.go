package exec

import (
	"fmt"
	"unicode/utf8"
)

// capture keeps the first head bytes and the last tail bytes of a stream in
// fixed buffers, so memory stays bounded however much the command prints.
type capture struct {
	headCap int
	head    []byte
	ring    []byte // the tail, circular; len == tail capacity
	pos     int    // next write position in ring
	filled  int    // valid bytes in ring
	total   int64
}

func newCapture(head, tail int) *capture {
	return &capture{headCap: head, head: make([]byte, 0, head), ring: make([]byte, tail)}
}

func (c *capture) write(p []byte) {
	c.total += int64(len(p))
	if room := c.headCap - len(c.head); room > 0 {
		n := min(room, len(p))
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	t := len(c.ring)
	if t == 0 || len(p) == 0 {
		return
	}
	if len(p) >= t {
		copy(c.ring, p[len(p)-t:])
		c.pos, c.filled = 0, t
		return
	}
	n := copy(c.ring[c.pos:], p)
	copy(c.ring, p[n:])
	c.pos = (c.pos + len(p)) % t
	c.filled = min(t, c.filled+len(p))
}

// tail returns the kept tail in order (a copy once the ring has wrapped).
func (c *capture) tail() []byte {
	if c.filled < len(c.ring) {
		return c.ring[:c.filled]
	}
	out := make([]byte, 0, len(c.ring))
	out = append(out, c.ring[c.pos:]...)
	return append(out, c.ring[:c.pos]...)
}

// render returns the kept text and its description. When the stream was
// longer than the budget the text is head + marker + tail, where the head
// loses a rune cut at its end and the tail a rune cut at its start (those
// bytes count as omitted), so the text never contains a split character.
func (c *capture) render(stream, fullPath string) (string, StreamTruncation) {
	head, tail := c.head, c.tail()
	info := StreamTruncation{FullOutputPath: fullPath}
	if c.total == int64(len(head)+len(tail)) {
		whole := make([]byte, 0, c.total)
		whole = append(append(whole, head...), tail...)
		text, bad := escapeUTF8(nil, whole)
		info.KeptBytes, info.InvalidUTF8Bytes = len(whole), bad
		return string(text), info
	}
	head = head[:completeRunesPrefix(head)]
	tail = tail[partialRuneStart(tail):]
	info.Truncated = true
	info.KeptBytes = len(head) + len(tail)
	info.OmittedBytes = c.total - int64(info.KeptBytes)
	text, bad1 := escapeUTF8(nil, head)
	text = append(text, marker(stream, fullPath, info.OmittedBytes)...)
	text, bad2 := escapeUTF8(text, tail)
	info.InvalidUTF8Bytes = bad1 + bad2
	return string(text), info
}

// marker is the in-band line that replaces the omitted middle of a stream.
func marker(stream, fullPath string, omitted int64) string {
	if fullPath == "" {
		return fmt.Sprintf("\n[airlock: %d bytes omitted; the full %s was not saved]\n", omitted, stream)
	}
	return fmt.Sprintf("\n[airlock: %d bytes omitted; full %s in %s]\n", omitted, stream, fullPath)
}

// completeRunesPrefix is len(b) minus an incomplete UTF-8 sequence at its end.
func completeRunesPrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// partialRuneStart counts the continuation bytes (at most 3) at the start of
// b: the rest of a character whose first bytes were omitted.
func partialRuneStart(b []byte) int {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return i
}

const hexDigits = "0123456789abcdef"

// escapeUTF8 appends b to dst with every byte that is not part of a valid
// UTF-8 sequence written as \xNN, and returns how many bytes were escaped.
// The result is always valid UTF-8, so it survives JSON unchanged.
func escapeUTF8(dst, b []byte) ([]byte, int) {
	if utf8.Valid(b) {
		return append(dst, b...), 0
	}
	bad := 0
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			dst = append(dst, b[0])
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, '\\', 'x', hexDigits[b[0]>>4], hexDigits[b[0]&15])
			bad++
		} else {
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst, bad
}
