package podexec

import (
	"errors"
	"sync"
)

var errSealed = errors.New("exec: output collected after the call ended")

// collector receives both output streams of a run, keeps the budgeted capture
// and emits chunks. One mutex serializes everything, so the chunk callback is
// never called concurrently.
type collector struct {
	mu      sync.Mutex
	streams [2]*streamState // stdout, stderr
	emit    func(Chunk) error
	onErr   func()
	err     error
	sealed  bool
}

type streamState struct {
	name   string
	cap    *capture
	carry  []byte // an incomplete rune held back from the last chunk
	offset int64  // raw bytes already emitted as chunks
}

func newCollector(head, tail int, emit func(Chunk) error, onErr func()) *collector {
	c := &collector{emit: emit, onErr: onErr}
	c.streams[0] = &streamState{name: "stdout", cap: newCapture(head, tail)}
	c.streams[1] = &streamState{name: "stderr", cap: newCapture(head, tail)}
	return c
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (c *collector) stdout() writerFunc {
	return func(p []byte) (int, error) {
		return c.write(p, func() { c.deliver(c.streams[0], p) })
	}
}

func (c *collector) stderr() writerFunc {
	return func(p []byte) (int, error) {
		return c.write(p, func() { c.deliver(c.streams[1], p) })
	}
}

func (c *collector) write(p []byte, f func()) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.sealed:
		return 0, errSealed
	case c.err != nil:
		return 0, c.err
	}
	f()
	if c.err != nil {
		return 0, c.err
	}
	return len(p), nil
}

// deliver takes command output; mu is held.
func (c *collector) deliver(s *streamState, b []byte) {
	if len(b) == 0 {
		return
	}
	s.cap.write(b)
	if c.emit == nil || c.err != nil {
		return
	}
	data := b
	if len(s.carry) > 0 {
		data = append(s.carry, b...)
	}
	k := completeRunesPrefix(data)
	c.emitChunk(s, data[:k])
	s.carry = append([]byte(nil), data[k:]...)
}

func (c *collector) emitChunk(s *streamState, raw []byte) {
	if len(raw) == 0 {
		return
	}
	text, _ := escapeUTF8(nil, raw)
	off := s.offset
	s.offset += int64(len(raw))
	if err := c.emit(Chunk{Stream: s.name, Data: string(text), Offset: off, Raw: raw}); err != nil {
		c.err = err
		c.onErr()
	}
}

// finish seals the collector: later writes fail. It flushes partial runes
// (escaped) and returns the consumer's error, if any.
func (c *collector) finish() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return c.err
	}
	c.sealed = true
	for _, s := range c.streams {
		if c.emit != nil && c.err == nil {
			c.emitChunk(s, s.carry)
		}
		s.carry = nil
	}
	return c.err
}

// received is how many raw bytes of each stream arrived so far.
func (c *collector) received() [2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [2]int64{c.streams[0].cap.total, c.streams[1].cap.total}
}

// render returns a stream's kept text; call after finish.
func (c *collector) render(i int, fullPath string) (string, StreamTruncation, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[i]
	text, info := s.cap.render(s.name, fullPath)
	return text, info, s.cap.total
}
