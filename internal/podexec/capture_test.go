package podexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// randomOutput mixes ASCII, multi-byte runes and (optionally) invalid bytes.
func randomOutput(r *rand.Rand, n int, binary bool) []byte {
	out := make([]byte, 0, n+4)
	for len(out) < n {
		switch k := r.IntN(10); {
		case k < 6:
			out = append(out, byte('a'+r.IntN(26)))
		case k < 7:
			out = append(out, '\n')
		case k < 9:
			out = utf8.AppendRune(out, []rune{'é', '€', '𝄞', '中'}[r.IntN(4)])
		case binary:
			out = append(out, byte(0x80+r.IntN(0x80)))
		}
	}
	if binary {
		return out[:n]
	}
	return out[:completeRunesPrefix(out[:n])]
}

// chunked feeds b to write in random pieces.
func chunked(r *rand.Rand, b []byte, write func([]byte)) {
	for len(b) > 0 {
		n := 1 + r.IntN(min(len(b), 1+r.IntN(5000)))
		write(b[:n])
		b = b[n:]
	}
}

func TestCaptureProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		head := r.IntN(300)
		tail := r.IntN(2000)
		if i%10 == 0 {
			head = 0
		}
		size := r.IntN(4 * (head + tail + 1))
		binary := i%3 == 0
		in := randomOutput(r, size, binary)
		c := newCapture(head, tail)
		chunked(r, in, c.write)
		path := fmt.Sprintf("/home/sandbox/.airlock/out/%d.stdout", i)
		text, info := c.render("stdout", path)
		checkRendered(t, in, head, tail, text, info, path, binary)
		if t.Failed() {
			t.Fatalf("case %d: head %d tail %d size %d", i, head, tail, size)
		}
	}
}

// checkRendered checks render's contract: the text is escape(prefix) +
// marker + escape(suffix) of the input (or escape(input) when that fits),
// whose escaped parts fit the head budget and the whole budget, cut only at
// character boundaries of valid input, with KeptBytes + OmittedBytes the
// input's length.
func checkRendered(t *testing.T, in []byte, head, tail int, text string, info StreamTruncation, path string, binary bool) {
	t.Helper()
	if !utf8.ValidString(text) {
		t.Errorf("invalid UTF-8 in %q", text)
	}
	if _, err := json.Marshal(text); err != nil {
		t.Errorf("json: %v", err)
	}
	whole, bad := escapeUTF8(nil, in)
	if len(in) <= head+tail && len(whole) <= head+tail {
		if info.Truncated || info.KeptBytes != len(in) || info.OmittedBytes != 0 || info.InvalidUTF8Bytes != bad {
			t.Errorf("untruncated info %+v for %d bytes", info, len(in))
		}
		if text != string(whole) {
			t.Errorf("text %q want %q", text, whole)
		}
		return
	}
	if !info.Truncated || int64(info.KeptBytes)+info.OmittedBytes != int64(len(in)) {
		t.Errorf("info %+v for %d bytes, budget %d", info, len(in), head+tail)
	}
	mark := marker("stdout", path, info.OmittedBytes)
	if !strings.Contains(mark, fmt.Sprint(info.OmittedBytes)+" bytes omitted") || !strings.Contains(mark, path) {
		t.Errorf("marker %q", mark)
	}
	i := strings.Index(text, mark)
	if i < 0 {
		t.Errorf("no marker in %q", text)
		return
	}
	h, tl := text[:i], text[i+len(mark):]
	if len(h) > head || len(h)+len(tl) > head+tail {
		t.Errorf("escaped head %d + tail %d over budget %d + %d", len(h), len(tl), head, tail)
	}
	// A prefix is at most head bytes and the suffix the rest of KeptBytes.
	for hn := 0; hn <= min(head, info.KeptBytes); hn++ {
		tn := info.KeptBytes - hn
		if eh, _ := escapeUTF8(nil, in[:hn]); string(eh) != h {
			continue
		}
		if et, _ := escapeUTF8(nil, in[len(in)-tn:]); string(et) != tl {
			continue
		}
		// Valid input loses at most a split character at each edge.
		if !binary && (!utf8.Valid(in[:hn]) || !utf8.Valid(in[len(in)-tn:]) || hn < head-(utf8.UTFMax-1) || tn < tail-(utf8.UTFMax-1)) {
			t.Errorf("valid input cut badly: head %d tail %d of budget %d+%d", hn, tn, head, tail)
		}
		return
	}
	t.Errorf("text is not head+marker+tail of the input: %q", text)
}

// Binary output with a small budget: the text returned, escapes included,
// fits the budget (300 KB of binary once came back as ~9,300 characters for
// a 4,096-byte budget), and kept_bytes counts the raw bytes shown.
func TestCaptureBudgetCountsEscapes(t *testing.T) {
	in := make([]byte, 300_000)
	for i := range in {
		in[i] = byte(i*7) | 0x80
	}
	c := newCapture(1024, 3072)
	c.write(in)
	text, info := c.render("stdout", "/p")
	mark := marker("stdout", "/p", info.OmittedBytes)
	if n := len(text) - len(mark); n > 4096 || n < 4096-3 {
		t.Fatalf("text without the marker is %d bytes, budget 4096", n)
	}
	if info.KeptBytes != 1024 || int64(info.KeptBytes)+info.OmittedBytes != int64(len(in)) || info.InvalidUTF8Bytes != info.KeptBytes {
		t.Fatalf("info %+v", info)
	}
	// Short, but too long once escaped: truncated although every byte arrived.
	c = newCapture(64, 192)
	c.write(in[:200])
	text, info = c.render("stdout", "/p")
	if !info.Truncated || len(text)-len(marker("stdout", "/p", info.OmittedBytes)) > 256 || info.OmittedBytes+int64(info.KeptBytes) != 200 {
		t.Fatalf("short binary: %+v %q", info, text)
	}
}

// Buffers grow with the output that arrives, not with the budget.
func TestCaptureGrowsWithOutput(t *testing.T) {
	c := newCapture(1<<10, 1<<20-1<<10)
	c.write([]byte("hello\n"))
	if cap(c.head)+cap(c.ring) > 1<<10 {
		t.Fatalf("6 bytes of output hold %d + %d bytes of buffer", cap(c.head), cap(c.ring))
	}
	for range 100 {
		c.write(bytes.Repeat([]byte("x"), 1000))
	}
	if cap(c.ring) > 2*100_000 {
		t.Fatalf("100 kB of output hold a %d-byte ring", cap(c.ring))
	}
}

func TestCaptureExactTailLarge(t *testing.T) {
	// 64 MiB through a 16 KiB budget: memory stays at the buffers, tail exact.
	c := newCapture(1024, 15*1024)
	var last []byte
	for i := 0; i < 64; i++ {
		b := bytes.Repeat([]byte(fmt.Sprintf("%07d\n", i)), 1<<20/8)
		c.write(b)
		last = b
	}
	text, info := c.render("stdout", "/p")
	if !strings.HasSuffix(text, string(last[len(last)-info.KeptBytes+1024:])) || info.OmittedBytes != 64<<20-16*1024 {
		t.Fatalf("info %+v", info)
	}
	if cap(c.ring) != 15*1024 || cap(c.head) != 1024 {
		t.Fatalf("buffers grew: %d %d", cap(c.ring), cap(c.head))
	}
}

func TestEscapeUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                 "plain",
		"é€𝄞":                   "é€𝄞",
		"\xff\xfe ok \xe2\x82":  `\xff\xfe ok \xe2\x82`,
		"\xed\xa0\x80":          `\xed\xa0\x80`, // surrogate half
		"\xef\xbf\xbd":          "\ufffd",       // a real U+FFFD stays
		"tab\tnul\x00":          "tab\tnul\x00",
		"\xc0\xaf overlong":     `\xc0\xaf overlong`,
		"\xf4\x90\x80\x80 >max": `\xf4\x90\x80\x80 >max`,
	} {
		got, _ := escapeUTF8(nil, []byte(in))
		if string(got) != want {
			t.Errorf("escape(%q) = %q want %q", in, got, want)
		}
	}
}
