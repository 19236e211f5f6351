package pid1link

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Flow control and health of a session. A saturated node can stall a stream for seconds, so the health check
// waits long before it gives up; a run's own stall timeout (the keeper's) still ends a stream nobody reads.
const (
	// maxStreams bounds the calls one session carries at once (each holds pipes and goroutines in PID 1).
	maxStreams = 64
	// streamWindow is how much of one call's output may be in flight unread; connWindow, of all calls.
	streamWindow = 1 << 20
	connWindow   = 4 << 20
	// pingAfter is how long a silent session waits before it pings; pingTimeout, for the answer.
	pingAfter   = 30 * time.Second
	pingTimeout = 30 * time.Second
	// writeTimeout ends a session on which no byte could be written for this long.
	writeTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a call's headers: calls carry everything in their bodies.
	maxHeaderBytes = 16 << 10
)

// Serve runs PID 1's side of a session on conn until the gateway closes it or it breaks: the TLS handshake
// with id, then HTTP/2, each call served by h. It closes conn.
func Serve(ctx context.Context, conn net.Conn, id *Identity, h http.Handler) error {
	defer conn.Close()
	tc := tls.Server(conn, ServerTLS(id))
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("session handshake: %w", err)
	}
	srv := &http2.Server{
		MaxConcurrentStreams:         maxStreams,
		MaxUploadBufferPerStream:     streamWindow,
		MaxUploadBufferPerConnection: connWindow,
		ReadIdleTimeout:              pingAfter,
		PingTimeout:                  pingTimeout,
		WriteByteTimeout:             writeTimeout,
		MaxDecoderHeaderTableSize:    4 << 10,
		MaxEncoderHeaderTableSize:    4 << 10,
	}
	srv.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: h,
		BaseConfig: &http.Server{MaxHeaderBytes: maxHeaderBytes}})
	return nil
}

// Dial runs the gateway's side of the handshake on conn, accepting only the holder of pin, and returns the
// HTTP/2 connection calls are made on. On error conn is closed.
func Dial(ctx context.Context, conn net.Conn, pin ed25519.PublicKey) (*http2.ClientConn, error) {
	tc := tls.Client(conn, ClientTLS(pin))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("session handshake: %w", err)
	}
	t := &http2.Transport{
		ReadIdleTimeout:  pingAfter,
		PingTimeout:      pingTimeout,
		WriteByteTimeout: writeTimeout,
		// One session per sandbox: its streams must not be refused for a connection-level limit of our own.
		StrictMaxConcurrentStreams: true,
		MaxReadFrameSize:           1 << 20,
	}
	cc, err := t.NewClientConn(tc)
	if err != nil {
		_ = tc.Close()
		return nil, fmt.Errorf("session: %w", err)
	}
	return cc, nil
}

// CallURL is the URL of a call on a session; the host is not looked up (the connection is given).
func CallURL(path string) string { return "https://" + serverName + path }
