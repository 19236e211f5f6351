package egressproxy

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// Limits are the connection caps a LimitListener enforces.
type Limits struct {
	// PerSource caps the open connections from one source address (one sandbox pod): more are answered 429.
	PerSource int
	// Total caps the open connections from all sources together, which bounds the proxy's memory
	// (Total × ConnectionCost), goroutines and file descriptors: more are answered 503.
	Total int
}

// LimitListener serves at most Limits.Total connections at once, at most Limits.PerSource of them from one
// source, so no sandbox, nor all of them together, can exhaust the proxy's memory, goroutines or file
// descriptors. At the total cap a new connection displaces the connection that has waited longest without
// sending a request, from a source holding at least as many connections as the newcomer's would: a flood of
// idle connections cannot lock a sandbox out, while connections carrying a request or a tunnel are never
// displaced. A connection over a cap is refused by a fixed pool of goroutines (refuse.go), or reset.
//
// Serve it with NewServer, which tells it which connections are carrying a request.
type LimitListener struct {
	net.Listener
	limits  Limits
	metrics *Metrics // nil: not counted

	refuser *refuser

	mu      sync.Mutex
	sources map[netip.Addr]*source
	conns   map[*limitedConn]struct{}
	seq     uint64 // orders waiting connections across sources
}

// source is what one source address holds: its open connections, and those waiting for a request, oldest first.
type source struct {
	open    int
	waiting list.List // of *limitedConn
}

// NewLimitListener serves l's connections within limits, counting refusals and displacements in m (may be nil).
func NewLimitListener(l net.Listener, limits Limits, m *Metrics) *LimitListener {
	return &LimitListener{Listener: l, limits: limits, metrics: m, refuser: startRefuser(),
		sources: map[netip.Addr]*source{}, conns: map[*limitedConn]struct{}{}}
}

// Accept returns the next connection within the caps; refused ones are answered by the refusers.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceAddr(c)
		lc, victim, refused := l.admit(c, src)
		if victim != nil {
			reset(victim.Conn)
			l.metrics.displacedOne()
		}
		if lc != nil {
			return lc, nil
		}
		l.refuse(c, refused)
	}
}

func (l *LimitListener) refuse(c net.Conn, why refusalCause) {
	switch why {
	case overSourceCap:
		l.metrics.limitedPerSource()
		l.refuser.refuse(c, http.StatusTooManyRequests,
			fmt.Sprintf("too many connections from this sandbox (limit %d)", l.limits.PerSource))
	default:
		l.metrics.limitedTotal()
		l.refuser.refuse(c, http.StatusServiceUnavailable,
			fmt.Sprintf("the proxy is serving its maximum of %d connections; retry shortly", l.limits.Total))
	}
}

// Close stops accepting and stops the refusers.
func (l *LimitListener) Close() error {
	l.refuser.stop()
	return l.Listener.Close()
}

func sourceAddr(c net.Conn) netip.Addr {
	if a, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return a.Addr().Unmap()
	}
	return netip.Addr{}
}

type refusalCause int

const (
	overSourceCap refusalCause = iota
	overTotalCap
)

// admit counts c against the caps and tracks it, displacing a waiting connection at the total cap when one
// may be (the caller resets victim). lc is nil when c is refused, for the reason given.
func (l *LimitListener) admit(c net.Conn, src netip.Addr) (lc, victim *limitedConn, refused refusalCause) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	if s == nil {
		s = &source{}
		l.sources[src] = s
	}
	if s.open >= l.limits.PerSource {
		l.forgetIfEmpty(src, s)
		return nil, nil, overSourceCap
	}
	if len(l.conns) >= l.limits.Total {
		if victim = l.longestWaiting(s.open + 1); victim == nil {
			l.forgetIfEmpty(src, s)
			return nil, nil, overTotalCap
		}
		l.releaseLocked(victim)
	}
	s.open++
	lc = &limitedConn{Conn: c, l: l, src: src}
	l.pushWaitingLocked(lc)
	l.conns[lc] = struct{}{}
	l.metrics.setOpen(len(l.conns))
	return lc, victim, 0
}

// longestWaiting is the connection that has waited longest for a request among sources holding at least
// holding connections, or nil.
func (l *LimitListener) longestWaiting(holding int) *limitedConn {
	var oldest *limitedConn
	for _, s := range l.sources {
		if s.open < holding || s.waiting.Len() == 0 {
			continue
		}
		c := s.waiting.Front().Value.(*limitedConn)
		if oldest == nil || c.waitSeq < oldest.waitSeq {
			oldest = c
		}
	}
	return oldest
}

// pushWaitingLocked makes lc displaceable, as its source's newest waiting connection.
func (l *LimitListener) pushWaitingLocked(lc *limitedConn) {
	l.seq++
	lc.waitSeq = l.seq
	lc.waitingAt = l.sources[lc.src].waiting.PushBack(lc)
}

func (l *LimitListener) forgetIfEmpty(src netip.Addr, s *source) {
	if s.open == 0 {
		delete(l.sources, src)
	}
}

// releaseLocked gives lc's slot back, once.
func (l *LimitListener) releaseLocked(lc *limitedConn) {
	if lc.released {
		return
	}
	lc.released = true
	s := l.sources[lc.src]
	if lc.waitingAt != nil {
		s.waiting.Remove(lc.waitingAt)
		lc.waitingAt = nil
	}
	s.open--
	l.forgetIfEmpty(lc.src, s)
	delete(l.conns, lc)
	l.metrics.setOpen(len(l.conns))
}

// Open is the number of connections being served.
func (l *LimitListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
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
		c.release()
		reset(c.Conn)
	}
}

// limitedConn is a served connection: it gives its slot back when closed, once, and is displaceable while it
// waits for a request.
type limitedConn struct {
	net.Conn
	l   *LimitListener
	src netip.Addr

	// Guarded by l.mu.
	released  bool
	waitingAt *list.Element // in its source's waiting list; nil while it carries a request
	waitSeq   uint64        // when it began waiting, for the oldest across sources
}

func (c *limitedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

func (c *limitedConn) release() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.releaseLocked(c)
}

// busy marks c as carrying a request (no longer displaceable); false if c was displaced already.
func (c *limitedConn) busy() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.released {
		return false
	}
	if c.waitingAt != nil {
		c.l.sources[c.src].waiting.Remove(c.waitingAt)
		c.waitingAt = nil
	}
	return true
}

// waiting marks c as waiting for its next request (keep-alive), displaceable again.
func (c *limitedConn) waiting() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.released || c.waitingAt != nil {
		return
	}
	c.l.pushWaitingLocked(c)
}

// CloseWrite half-closes a TCP connection, for the end of a tunnel's upload.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
