package gateway

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"airlock.dev/airlock/internal/podexec"
)

func testMasker() *masker {
	return &masker{names: []string{"A", "B"}, values: []string{"abcdef", "xyz1"}, hold: 5, pending: map[string]string{}}
}

// A value the truncation marker cuts shows no piece either side: the head's end that starts a value and the
// tail's start that ends one are masked, however short, and so around anything that reads like the marker.
func TestMaskerTruncatedMasksBothPiecesOfACutValue(t *testing.T) {
	m := testMasker()
	mark := func(n int) string { return fmt.Sprintf("\n[airlock: %d bytes omitted; full stdout in /o]\n", n) }
	tr := podexec.StreamTruncation{Truncated: true, OmittedBytes: 7}
	for _, tc := range []struct{ in, want string }{
		{"11ab" + mark(7) + "ef22", "11[masked:A]" + mark(7) + "[masked:A]22"},
		{"11a" + mark(7) + "22", "11[masked:A]" + mark(7) + "22"},
		{"11" + mark(7) + "yz1 22", "11" + mark(7) + "[masked:B] 22"},
		{"abcdef" + mark(7) + "abcdef", "[masked:A]" + mark(7) + "[masked:A]"},
		{"x" + mark(7) + "xyz1 abcde", "[masked:B]" + mark(7) + "[masked:B] abcde"},
		// Printed by the command, as like the marker as it can: masked around it too.
		{"ab" + mark(7) + "cdef abcdef" + mark(7) + "1", "[masked:A]" + mark(7) + "[masked:A] [masked:A]" + mark(7) + "[masked:B]"},
		// Another count is no marker.
		{"ab" + mark(8) + "cd", "ab" + mark(8) + "cd"},
	} {
		if got := m.truncated(tc.in, tr); got != tc.want {
			t.Errorf("truncated(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := m.truncated("abcdef ab", podexec.StreamTruncation{}); got != "[masked:A] ab" {
		t.Errorf("an untruncated stream: %q", got)
	}
}

// A download masks whatever the writes' sizes: the bytes join to the masked file, and no write carries a value
// or the start of one that the next write completes.
func TestMaskingWriterWhateverTheWrites(t *testing.T) {
	file := []byte("1abcdef2xyz1xyabcdefxyz1\xff3abcde")
	want := "1[masked:A]2[masked:B]xy[masked:A][masked:B]\xff3abcde"
	for size := 1; size <= len(file); size++ {
		var out bytes.Buffer
		var writes []string
		w := testMasker().stream(writerFunc(func(b []byte) (int, error) {
			writes = append(writes, string(b))
			return out.Write(b)
		}))
		for i := 0; i < len(file); i += size {
			if n, err := w.Write(file[i:min(i+size, len(file))]); err != nil || n != min(size, len(file)-i) {
				t.Fatalf("write: %d, %v", n, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("writes of %d: %q, want %q", size, out.String(), want)
		}
		for _, s := range writes {
			if strings.Contains(s, "abcdef") || strings.Contains(s, "xyz1") {
				t.Errorf("writes of %d: %q carries a value", size, s)
			}
		}
	}
	var none *masker
	var out bytes.Buffer
	if _, err := none.stream(&out).Write([]byte("abcdef")); err != nil || out.String() != "abcdef" {
		t.Errorf("no secrets: %q %v", out.String(), err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
