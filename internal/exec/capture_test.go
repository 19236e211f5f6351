package exec

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

func checkRendered(t *testing.T, in []byte, head, tail int, text string, info StreamTruncation, path string, binary bool) {
	t.Helper()
	if !utf8.ValidString(text) {
		t.Errorf("invalid UTF-8 in %q", text)
	}
	if _, err := json.Marshal(text); err != nil {
		t.Errorf("json: %v", err)
	}
	if len(in) <= head+tail {
		if info.Truncated || info.KeptBytes != len(in) || info.OmittedBytes != 0 {
			t.Errorf("untruncated info %+v for %d bytes", info, len(in))
		}
		if want, _ := escapeUTF8(nil, in); text != string(want) {
			t.Errorf("text %q want %q", text, want)
		}
		return
	}
	if !info.Truncated || info.KeptBytes > head+tail || int64(info.KeptBytes)+info.OmittedBytes != int64(len(in)) {
		t.Errorf("info %+v for %d bytes, budget %d", info, len(in), head+tail)
	}
	mark := marker("stdout", path, info.OmittedBytes)
	if !strings.Contains(mark, fmt.Sprint(info.OmittedBytes)+" bytes omitted") || !strings.Contains(mark, path) {
		t.Errorf("marker %q", mark)
	}
	// The text is exactly escape(prefix) + marker + escape(suffix), where the
	// prefix is the head budget less at most a split rune, likewise the
	// suffix, and both add up to KeptBytes.
	for hn := head; hn >= max(0, head-(utf8.UTFMax-1)); hn-- {
		for tn := tail; tn >= max(0, tail-(utf8.UTFMax-1)); tn-- {
			h, _ := escapeUTF8(nil, in[:hn])
			tl, _ := escapeUTF8(nil, in[len(in)-tn:])
			if text == string(h)+mark+string(tl) {
				if hn+tn != info.KeptBytes {
					t.Errorf("head %d + tail %d != kept %d", hn, tn, info.KeptBytes)
				}
				if !binary && (!utf8.Valid(in[:hn]) || !utf8.Valid(in[len(in)-tn:])) {
					t.Errorf("valid input cut inside a rune")
				}
				return
			}
		}
	}
	t.Errorf("text is not head+marker+tail of the input: %q", text)
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
