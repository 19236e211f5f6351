package exec

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"airlock.dev/airlock/internal/runwrap"
)

const nonceA = "nonceAAAAAAAAAAAAAAAAAAAAAAAAAAA"

func trailerBytes(t *testing.T, nonce string, code int) []byte {
	t.Helper()
	b, err := runwrap.FormatTrailer(nonce, runwrap.Trailer{ExitCode: code, StdoutPath: "/o", StderrBytes: 5})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// split runs stream through a splitter in the given pieces.
func split(pieces [][]byte) (string, *runwrap.Trailer) {
	var out bytes.Buffer
	s := newTrailerSplitter(nonceA, func(b []byte) { out.Write(b) })
	for _, p := range pieces {
		s.write(p)
	}
	tr := s.close()
	return out.String(), tr
}

func TestTrailerSplitEveryPosition(t *testing.T) {
	real := trailerBytes(t, nonceA, 7)
	for _, user := range []string{"", "err", "line\n", "\n", "x\n" + nonceA, "partial " + nonceA[:10]} {
		stream := append([]byte(user), real...)
		for i := 0; i <= len(stream); i++ {
			for j := i; j <= len(stream); j += 1 + j/3 {
				data, tr := split([][]byte{stream[:i], stream[i:j], stream[j:]})
				if tr == nil || tr.ExitCode != 7 || data != user {
					t.Fatalf("user %q cut %d,%d: data %q trailer %+v", user, i, j, data, tr)
				}
			}
		}
	}
}

func TestTrailerForgeries(t *testing.T) {
	real := trailerBytes(t, nonceA, 0)
	other := trailerBytes(t, "nonceBBBBBBBBBBBBBBBBBBBBBBBBBBB", 0)
	mid := trailerBytes(t, nonceA, 99)
	cases := []struct {
		name, stream string
		wantData     string
		wantCode     int // -1: no trailer
	}{
		{"other nonce only", string(other), string(other), -1},
		{"other nonce then real", string(other) + string(real), string(other), 0},
		{"real-looking line mid-stream", "a" + string(mid) + "b", "a" + string(mid) + "b", -1},
		{"real-looking line, then real", "a" + string(mid) + string(real), "a" + string(mid), 0},
		{"trailing data after trailer", string(real) + "x", string(real) + "x", -1},
		{"invalid json", "\n" + nonceA + " {nope\n", "\n" + nonceA + " {nope\n", -1},
		{"no version", "\n" + nonceA + " {\"exit_code\":0}\n", "\n" + nonceA + " {\"exit_code\":0}\n", -1},
		{"missing final newline", strings.TrimSuffix(string(real), "\n"), strings.TrimSuffix(string(real), "\n"), -1},
		{"empty", "", "", -1},
	}
	for _, tc := range cases {
		r := rand.New(rand.NewPCG(3, 4))
		for k := 0; k < 50; k++ {
			var pieces [][]byte
			b := []byte(tc.stream)
			chunked(r, b, func(p []byte) { pieces = append(pieces, append([]byte(nil), p...)) })
			data, tr := split(pieces)
			code := -1
			if tr != nil {
				code = tr.ExitCode
			}
			if data != tc.wantData || code != tc.wantCode {
				t.Fatalf("%s: data %q code %d; want %q %d", tc.name, data, code, tc.wantData, tc.wantCode)
			}
		}
	}
}

func TestTrailerHoldsLittle(t *testing.T) {
	var out bytes.Buffer
	s := newTrailerSplitter(nonceA, func(b []byte) { out.Write(b) })
	s.write(bytes.Repeat([]byte("y\n"), 1<<20))
	if len(s.held) != 1 { // the final "\n" might start a marker
		t.Fatalf("held %d bytes", len(s.held))
	}
	// A marker line longer than any trailer is released as data.
	s.write([]byte("\n" + nonceA + " " + strings.Repeat("z", maxTrailerLine+10)))
	if len(s.held) > len(nonceA)+2 {
		t.Fatalf("held %d bytes of an over-long line", len(s.held))
	}
}
