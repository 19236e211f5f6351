package egressproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// LimitListener caps the open connections from each source address (one sandbox pod each). A connection over
// the cap is answered 429 and closed without being served, so a sandbox cannot exhaust the proxy's memory or
// file descriptors, nor the connections of other sandboxes.
type LimitListener struct {
	net.Listener
	Max int
	// OnLimit is told of each refused connection (metrics).
	OnLimit func(src netip.Addr)

	mu    sync.Mutex
	open  map[netip.Addr]int
	conns map[*limitedConn]struct{}
}

// Accept returns the next connection under the cap; refused ones are answered in the background.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceAddr(c)
		if lc := l.admit(c, src); lc != nil {
			return lc, nil
		}
		if l.OnLimit != nil {
			l.OnLimit(src)
		}
		go refuseOverLimit(c, l.Max)
	}
}

func sourceAddr(c net.Conn) netip.Addr {
	if a, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return a.Addr().Unmap()
	}
	return netip.Addr{}
}

// admit counts c against its source's cap and tracks it, or returns nil when the source is at the cap.
func (l *LimitListener) admit(c net.Conn, src netip.Addr) *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open, l.conns = map[netip.Addr]int{}, map[*limitedConn]struct{}{}
	}
	if l.open[src] >= l.Max {
		return nil
	}
	l.open[src]++
	lc := &limitedConn{Conn: c}
	lc.release = sync.OnceFunc(func() { l.release(lc, src) })
	l.conns[lc] = struct{}{}
	return lc
}

func (l *LimitListener) release(lc *limitedConn, src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, lc)
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// Abort resets every connection still open (tunnels and requests alike): a reset reaches the client at once,
// while a plain close would first wait for a slow reader to drain the send buffer, and a proxy pod that is
// gone by then leaves the client hanging.
func (l *LimitListener) Abort() {
	l.mu.Lock()
	conns := make([]*limitedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		if tcp, ok := c.Conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = c.Close()
	}
}

// refuseOverLimit reads the request line and headers (briefly, bounded) so the client gets the 429 rather than
// a reset, then closes.
func refuseOverLimit(c net.Conn, limit int) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := http.ReadRequest(bufio.NewReaderSize(&boundedReader{r: c, n: 64 << 10}, 4096)); err != nil {
		return
	}
	phrase := fmt.Sprintf("airlock egress proxy: too many connections from this sandbox (limit %d)", limit)
	fmt.Fprintf(c, "HTTP/1.1 429 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		phrase, len(phrase)+1, phrase)
}

type boundedReader struct {
	r net.Conn
	n int
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, fmt.Errorf("request header too large")
	}
	if len(p) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= n
	return n, err
}

// limitedConn gives its slot back when closed, once.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite half-closes a TCP connection, for the end of a tunnel's upload.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
