package pid1link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Kinds of frame in a run's answer: output of either stream, then one reply that ends it.
const (
	FrameStdout byte = '1'
	FrameStderr byte = '2'
	FrameReply  byte = 'R'
)

// MaxFramePayload bounds one frame: output is sent in chunks of at most this, a reply must fit.
const MaxFramePayload = 8 << 20

// WriteFrame writes one frame: its kind, the payload's length (4 bytes, big-endian), the payload.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return fmt.Errorf("frame of %d bytes: at most %d", len(payload), MaxFramePayload)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	if _, err := w.Write(payload); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame into buf (grown as needed, up to MaxFramePayload) and returns its kind and payload.
// io.EOF means the stream ended cleanly between frames.
func ReadFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("read frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFramePayload {
		return 0, nil, fmt.Errorf("frame of %d bytes: at most %d", n, MaxFramePayload)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("read frame: %w", err)
	}
	return hdr[0], buf, nil
}
