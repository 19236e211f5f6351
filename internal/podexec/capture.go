package podexec

import (
	"fmt"
	"slices"
	"unicode/utf8"
	"unsafe"
)

// capture keeps the first bytes and the last bytes of a stream, enough for a
// rendering that fits the budget. Buffers grow with the output that arrives,
// up to their caps: a call that prints little costs little, whatever its
// budget.
type capture struct {
	headCap, tailCap int
	head             []byte
	ring             []byte // the tail; circular once len(ring) == tailCap
	pos              int    // oldest byte of a full ring (next write position)
	total            int64
}

func newCapture(head, tail int) *capture {
	return &capture{headCap: head, tailCap: tail}
}

func (c *capture) write(p []byte) {
	c.total += int64(len(p))
	if room := c.headCap - len(c.head); room > 0 {
		n := min(room, len(p))
		c.head = appendCapped(c.head, p[:n], c.headCap)
		p = p[n:]
	}
	t := c.tailCap
	if t == 0 || len(p) == 0 {
		return
	}
	if len(p) >= t {
		if cap(c.ring) < t {
			c.ring = make([]byte, t)
		}
		c.ring = c.ring[:t]
		copy(c.ring, p[len(p)-t:])
		c.pos = 0
		return
	}
	if len(c.ring) < t {
		k := min(len(p), t-len(c.ring))
		c.ring = appendCapped(c.ring, p[:k], t)
		p = p[k:]
		c.pos = 0
		if len(p) == 0 {
			return
		}
	}
	n := copy(c.ring[c.pos:], p)
	copy(c.ring, p[n:])
	c.pos = (c.pos + len(p)) % t
}

// appendCapped appends p to b, growing b geometrically but never beyond limit.
func appendCapped(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		nb := make([]byte, len(b), min(limit, max(need, 2*cap(b), 512)))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// tail returns the kept tail in order. A full ring is rotated in place, so
// rendering allocates nothing beyond the text itself.
func (c *capture) tail() []byte {
	if len(c.ring) == c.tailCap && c.pos != 0 {
		slices.Reverse(c.ring[:c.pos])
		slices.Reverse(c.ring[c.pos:])
		slices.Reverse(c.ring)
		c.pos = 0
	}
	return c.ring
}

// render returns the kept text and its description. The budget counts the
// text as returned: an invalid byte shown as \xNN costs 4, so binary output
// keeps fewer raw bytes rather than returning a longer text. When the whole
// stream does not fit, the text is head + marker + tail: the head is the
// longest prefix whose text fits the head budget, the tail the longest suffix
// whose text fits what is left; a character cut at either edge is dropped
// (those bytes count as omitted), so the text never contains a split
// character.
func (c *capture) render(stream, fullPath string) (string, StreamTruncation) {
	head, tail := c.head, c.tail()
	budget := c.headCap + c.tailCap
	info := StreamTruncation{FullOutputPath: fullPath}
	if c.total == int64(len(head)+len(tail)) {
		if n, bad := escapedLen(head, tail); n <= budget {
			text := appendEscaped(make([]byte, 0, n), head, tail)
			info.KeptBytes, info.InvalidUTF8Bytes = len(head)+len(tail), bad
			return bytesToString(text), info
		}
	}
	hn, hcost := fitPrefix(head, c.headCap)
	ts, tcost := fitSuffix(tail, budget-hcost)
	head, tail = head[:hn], tail[ts:]
	info.Truncated = true
	info.KeptBytes = len(head) + len(tail)
	info.OmittedBytes = c.total - int64(info.KeptBytes)
	mark := marker(stream, fullPath, info.OmittedBytes)
	text := make([]byte, 0, hcost+len(mark)+tcost)
	text, bad1 := escapeUTF8(text, head)
	text = append(text, mark...)
	text, bad2 := escapeUTF8(text, tail)
	info.InvalidUTF8Bytes = bad1 + bad2
	return bytesToString(text), info
}

// bytesToString returns b as a string without copying (b must not change
// afterwards): the text can be a large part of a call's memory.
func bytesToString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// token describes the first unit of b as escapeUTF8 renders it: an ASCII
// byte, a valid multi-byte character, or an invalid byte shown as \xNN.
func token(b []byte) (size, cost int, bad bool) {
	if b[0] < utf8.RuneSelf {
		return 1, 1, false
	}
	r, n := utf8.DecodeRune(b)
	if r == utf8.RuneError && n == 1 {
		return 1, 4, true
	}
	return n, n, false
}

// junction splits adjacent parts a, b of one stream around a character that
// may straddle them: a[:k] and b[skip:] render alone, j (a's last bytes and
// b's first) holds the straddling characters.
func junction(a, b []byte) (k int, j []byte, skip int) {
	k = completeRunesPrefix(a)
	if k == len(a) {
		return k, nil, 0
	}
	j = append(append(make([]byte, 0, 2*utf8.UTFMax), a[k:]...), b[:min(len(b), utf8.UTFMax)]...)
	n := 0
	for n < len(a)-k {
		size, _, _ := token(j[n:])
		n += size
	}
	return k, j[:n], n - (len(a) - k)
}

// escapedLen is the length of escapeUTF8(a+b) and how many bytes it escapes.
func escapedLen(a, b []byte) (n, bad int) {
	k, j, skip := junction(a, b)
	for _, part := range [][]byte{a[:k], j, b[skip:]} {
		if utf8.Valid(part) {
			n += len(part)
			continue
		}
		for len(part) > 0 {
			size, cost, isBad := token(part)
			n += cost
			if isBad {
				bad++
			}
			part = part[size:]
		}
	}
	return n, bad
}

// appendEscaped appends escapeUTF8(a+b) to dst without joining a and b.
func appendEscaped(dst, a, b []byte) []byte {
	k, j, skip := junction(a, b)
	dst, _ = escapeUTF8(dst, a[:k])
	dst, _ = escapeUTF8(dst, j)
	dst, _ = escapeUTF8(dst, b[skip:])
	return dst
}

// fitPrefix returns the longest prefix of b, ending on a whole character,
// whose text fits budget, and the text's length.
func fitPrefix(b []byte, budget int) (n, cost int) {
	end := completeRunesPrefix(b)
	for n < end {
		size, c, _ := token(b[n:end])
		if cost+c > budget {
			break
		}
		n, cost = n+size, cost+c
	}
	return n, cost
}

// fitSuffix returns where the longest suffix of b whose text fits budget
// starts (never inside a character whose start was cut), and the text's
// length.
func fitSuffix(b []byte, budget int) (start, cost int) {
	start = max(0, len(b)-budget) // a suffix's text is at least as long as it
	start += partialRuneStart(b[start:])
	for rest := b[start:]; len(rest) > 0; {
		size, c, _ := token(rest)
		cost += c
		rest = rest[size:]
	}
	for cost > budget {
		size, c, _ := token(b[start:])
		start, cost = start+size, cost-c
	}
	return start, cost
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
		size, _, isBad := token(b)
		if isBad {
			dst = append(dst, '\\', 'x', hexDigits[b[0]>>4], hexDigits[b[0]&15])
			bad++
		} else {
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst, bad
}
