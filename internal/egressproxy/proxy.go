package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"airlock.dev/airlock/internal/allowlist"
)

// Client is the sandbox a connection comes from, as the Directory knows it.
type Client struct {
	Namespace, Name, UID string
	Allow                allowlist.List
}

// Directory finds the sandbox behind a connection's source address. Its error says why there is none.
type Directory interface {
	Lookup(ip netip.Addr) (Client, error)
}

// Recorder is told of every destination a sandbox asked for; the Kubernetes one turns them into Events.
type Recorder interface {
	Record(c Client, allowed bool, target, detail string)
}

// Proxy is the egress proxy's HTTP handler. Serve it with NewServer on a LimitListener, which enforces the
// connection limits.
type Proxy struct {
	Directory Directory
	Dialer    *Dialer
	Metrics   *Metrics
	Recorder  Recorder
	Log       logr.Logger
	// TunnelIdle closes a CONNECT tunnel that moved no byte for this long.
	TunnelIdle time.Duration

	transport *http.Transport
	once      sync.Once
}

// copyBuffers bound the memory each connection uses, whatever is downloaded through it (cost.go).
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferBytes); return &b }}

func (p *Proxy) init() {
	p.once.Do(func() {
		p.transport = &http.Transport{
			// Never the environment's proxy: the proxy connects only where its dialer allows.
			Proxy: nil,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				host, port, err := splitHostPort(addr, 80)
				if err != nil {
					return nil, err
				}
				return p.Dialer.Dial(ctx, host, port)
			},
			DisableKeepAlives:      true, // each request dials anew, so each is checked and counted
			DisableCompression:     true, // pass bodies through as they are
			MaxResponseHeaderBytes: maxResponseHeadBytes,
			ResponseHeaderTimeout:  time.Minute,
		}
	})
}

// ServeHTTP handles CONNECT host:port (tunnels, for TLS) and absolute-URI http:// requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.init()
	src, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		deny(w, http.StatusForbidden, "cannot tell who is calling")
		return
	}
	c, err := p.Directory.Lookup(src.Addr().Unmap())
	if err != nil {
		p.Metrics.unknown.Inc()
		p.Log.Info("refused a caller that is no Restricted sandbox", "source", src.Addr().String(), "reason", err.Error())
		deny(w, http.StatusForbidden, "this proxy serves only Restricted sandboxes: "+err.Error())
		return
	}
	host, port, err := target(r)
	if err != nil {
		p.refuse(w, c, r.Host, http.StatusBadRequest, err.Error())
		return
	}
	hostport := net.JoinHostPort(host, strconv.Itoa(port))
	if !c.Allow.Permits(host, port) {
		p.refuse(w, c, hostport, http.StatusForbidden, fmt.Sprintf("%s is not on sandbox %s/%s's allowlist (network.allow)", hostport, c.Namespace, c.Name))
		return
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, r, c, host, port, hostport)
		return
	}
	p.forward(w, r, c, hostport)
}

// target is the destination of a proxy request: CONNECT's authority, or an absolute http:// URL's host.
func target(r *http.Request) (string, int, error) {
	if r.Method == http.MethodConnect {
		return splitHostPort(r.Host, 0)
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		return "", 0, fmt.Errorf("not a proxy request: send CONNECT host:port, or an absolute http:// URL")
	}
	return splitHostPort(r.URL.Host, 80)
}

func splitHostPort(hostport string, defaultPort int) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return "", 0, fmt.Errorf("%q is not host:port", hostport)
		}
		host, p = hostport, strconv.Itoa(defaultPort)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port", hostport)
	}
	return host, port, nil
}

// refuse denies a request with a reason the client's tool will show, and records it.
func (p *Proxy) refuse(w http.ResponseWriter, c Client, hostport string, code int, reason string) {
	p.Metrics.connections.WithLabelValues(c.Namespace, c.Name, "denied").Inc()
	p.Log.Info("denied", "sandbox", c.Namespace+"/"+c.Name, "target", hostport, "reason", reason)
	if p.Recorder != nil {
		p.Recorder.Record(c, false, hostport, reason)
	}
	deny(w, code, reason)
}

// allowed records a connection that was made.
func (p *Proxy) allowed(c Client, hostport string) {
	p.Metrics.connections.WithLabelValues(c.Namespace, c.Name, "allowed").Inc()
	p.Log.V(1).Info("allowed", "sandbox", c.Namespace+"/"+c.Name, "target", hostport)
	if p.Recorder != nil {
		p.Recorder.Record(c, true, hostport, "")
	}
}

// dialFailed maps a dial error to a refusal: a blocked address is forbidden, the rest is a bad gateway.
func (p *Proxy) dialFailed(w http.ResponseWriter, c Client, hostport string, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, ErrBlockedAddress) {
		code = http.StatusForbidden
	}
	p.refuse(w, c, hostport, code, err.Error())
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, c Client, host string, port int, hostport string) {
	up, err := p.Dialer.Dial(r.Context(), host, port)
	if err != nil {
		p.dialFailed(w, c, hostport, err)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		deny(w, http.StatusInternalServerError, "cannot tunnel on this connection")
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer down.Close()
	p.allowed(c, hostport)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	sent := p.Metrics.bytes.WithLabelValues(c.Namespace, c.Name, "sent")
	received := p.Metrics.bytes.WithLabelValues(c.Namespace, c.Name, "received")
	idle := &idleConn{Conn: down, timeout: p.TunnelIdle}
	upIdle := &idleConn{Conn: up, timeout: p.TunnelIdle}
	done := make(chan struct{})
	go func() {
		// What the client sent after its CONNECT may already sit in the server's read buffer.
		_ = copyCounting(upIdle, io.MultiReader(io.LimitReader(rw.Reader, int64(rw.Reader.Buffered())), idle), sent)
		closeWrite(up)
		close(done)
	}()
	_ = copyCounting(idle, upIdle, received)
	closeWrite(down)
	<-done
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, c Client, hostport string) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if out.Body != nil && out.Body != http.NoBody {
		out.Body = &countingReader{r: r.Body, c: p.Metrics.bytes.WithLabelValues(c.Namespace, c.Name, "sent")}
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.dialFailed(w, c, hostport, err)
		return
	}
	defer resp.Body.Close()
	p.allowed(c, hostport)
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	// An error here (the upstream or the client went away) cuts the response short: the client sees a body
	// shorter than announced, or an unterminated chunked body, and reports it.
	_ = copyCounting(w, resp.Body, p.Metrics.bytes.WithLabelValues(c.Namespace, c.Name, "received"))
}

// hopHeaders are meaningful only on one connection and are not passed on (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// deny answers with code and a reason phrase that names the reason: pip, npm and curl show the status line
// of a failed CONNECT, not its body. The connection is closed after.
func deny(w http.ResponseWriter, code int, reason string) {
	phrase := "airlock egress proxy: " + sanitizePhrase(reason)
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, phrase, code)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := phrase + "\n"
	fmt.Fprintf(rw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, phrase, len(body), body)
	_ = rw.Flush()
}

// sanitizePhrase keeps a reason phrase to printable ASCII on one line (RFC 9112 4).
func sanitizePhrase(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch < 0x20 || ch > 0x7e {
			b[i] = '?'
		}
	}
	if len(b) > 400 {
		b = b[:400]
	}
	return string(b)
}

// Counter is what byte counts are added to.
type Counter interface{ Add(float64) }

// copyCounting streams src to dst through a pooled fixed buffer, adding each chunk to c as it passes.
func copyCounting(dst io.Writer, src io.Reader, c Counter) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			c.Add(float64(n))
			if f, ok := dst.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

type countingReader struct {
	r io.ReadCloser
	c Counter
}

func (cr *countingReader) Read(b []byte) (int, error) {
	n, err := cr.r.Read(b)
	cr.c.Add(float64(n))
	return n, err
}

func (cr *countingReader) Close() error { return cr.r.Close() }

// idleConn pushes its deadline forward on every read and write, so only a tunnel that moves nothing times out.
type idleConn struct {
	net.Conn
	timeout time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	if c.timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(c.timeout))
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if c.timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(c.timeout))
	}
	return c.Conn.Write(b)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
