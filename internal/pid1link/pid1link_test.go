package pid1link

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A session works with the server's own key and with no other; the handshake runs over any stream (here a
// net.Pipe, in production an exec's stdin and stdout).
func TestSessionPinsTheServerKey(t *testing.T) {
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_ = WriteFrame(w, FrameReply, append([]byte("echo:"), body...))
	})
	for _, tc := range []struct {
		name string
		pin  string
		ok   bool
	}{{"own key", id.PublicKey(), true}, {"another key", other.PublicKey(), false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := net.Pipe()
			go func() { _ = Serve(context.Background(), srv, id, h) }()
			pin, err := ParsePublicKey(tc.pin)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cc, err := Dial(ctx, cli, pin)
			if !tc.ok {
				if !errors.Is(err, ErrWrongKey) {
					t.Fatalf("want ErrWrongKey, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, CallURL("/x"), bytes.NewReader([]byte("hi")))
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			kind, payload, err := ReadFrame(resp.Body, nil)
			if err != nil || kind != FrameReply || string(payload) != "echo:hi" {
				t.Fatalf("got %q %q %v", kind, payload, err)
			}
		})
	}
}

func TestParsePublicKey(t *testing.T) {
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePublicKey(id.PublicKey()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "rsa:AAAA", "ed25519:!!", "ed25519:AAAA"} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	for _, p := range [][]byte{nil, []byte("out"), bytes.Repeat([]byte{0}, 70000)} {
		if err := WriteFrame(&b, FrameStdout, p); err != nil {
			t.Fatal(err)
		}
	}
	var buf []byte
	for _, want := range []int{0, 3, 70000} {
		kind, p, err := ReadFrame(&b, buf)
		if err != nil || kind != FrameStdout || len(p) != want {
			t.Fatalf("got %q %d %v, want %d bytes", kind, len(p), err, want)
		}
		buf = p
	}
	if _, _, err := ReadFrame(&b, buf); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader([]byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}), nil); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
	if _, _, err := ReadFrame(bytes.NewReader([]byte{FrameStdout, 0, 0}), nil); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a cut header: %v", err)
	}
}
