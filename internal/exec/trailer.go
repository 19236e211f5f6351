package exec

import (
	"bytes"
	"encoding/json"

	"airlock.dev/airlock/internal/runwrap"
)

// maxTrailerLine bounds how much a trailer candidate may hold back.
const maxTrailerLine = 64 << 10

// trailerSplitter separates the wrapper's trailer from the command's stderr.
// The trailer is "\n" NONCE " " JSON "\n" and only counts as the very last
// bytes of the stream, so the splitter passes data through as it comes and
// holds back only what could still turn out to be the trailer: a suffix that
// is a prefix of the marker, or one marker line that ends the data so far.
type trailerSplitter struct {
	marker []byte // "\n" + nonce + " "
	held   []byte
	out    func([]byte)
}

func newTrailerSplitter(nonce string, out func([]byte)) *trailerSplitter {
	return &trailerSplitter{marker: []byte("\n" + nonce + " "), out: out}
}

func (t *trailerSplitter) write(p []byte) {
	if len(t.held) == 0 {
		// Common case: pass through what cannot start a marker without copying.
		cut := bytes.Index(p, t.marker)
		if cut < 0 {
			cut = len(p) - overlap(p, t.marker)
		}
		if cut > 0 {
			t.out(p[:cut])
			p = p[cut:]
		}
	}
	t.held = append(t.held, p...)
	t.release()
}

func (t *trailerSplitter) release() {
	for {
		i := bytes.Index(t.held, t.marker)
		if i < 0 {
			t.flush(len(t.held) - overlap(t.held, t.marker))
			return
		}
		t.flush(i)
		rest := t.held[len(t.marker):]
		nl := bytes.IndexByte(rest, '\n')
		switch {
		case nl < 0 && len(rest) > maxTrailerLine:
			t.flush(1) // too long for a trailer: it is data
		case nl < 0, nl == len(rest)-1:
			return // may be the final line: wait
		default:
			// Data follows, so this line is not the trailer. Its newline may
			// start the next marker, so release up to just before it.
			t.flush(len(t.marker) + nl)
		}
	}
}

func (t *trailerSplitter) flush(n int) {
	if n <= 0 {
		return
	}
	t.out(t.held[:n])
	t.held = append(t.held[:0], t.held[n:]...)
}

// close ends the stream: it returns the trailer if the held bytes are exactly
// one valid trailer line, else it releases them as data and returns nil.
func (t *trailerSplitter) close() *runwrap.Trailer {
	defer func() { t.held = nil }()
	if bytes.HasPrefix(t.held, t.marker) && len(t.held) > len(t.marker) {
		line := t.held[len(t.marker) : len(t.held)-1]
		if t.held[len(t.held)-1] == '\n' && bytes.IndexByte(line, '\n') < 0 {
			var tr runwrap.Trailer
			if json.Unmarshal(line, &tr) == nil && tr.V >= 1 {
				return &tr
			}
		}
	}
	t.flush(len(t.held))
	return nil
}

// overlap is the length of the longest suffix of b that is a proper prefix
// of m.
func overlap(b, m []byte) int {
	for k := min(len(b), len(m)-1); k > 0; k-- {
		if bytes.Equal(b[len(b)-k:], m[:k]) {
			return k
		}
	}
	return 0
}
