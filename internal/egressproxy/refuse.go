package egressproxy

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"time"
)

// Refusing costs a fixed amount whatever the number of connections refused: refuseWorkers goroutines answer
// them one at a time, each waiting at most refuseWait for the request head (so the client reads the answer
// rather than a reset caused by its unread request), and at most refuseQueue wait for a worker. A connection
// refused while the queue is full is reset at once.
const (
	refuseWorkers   = 8
	refuseQueue     = 128
	refuseWait      = time.Second
	refuseBufBytes  = 4 << 10
	refuseFixedCost = refuseWorkers*(refuseBufBytes+goroutineStackBytes) + refuseQueue*connStructBytes
)

type refusal struct {
	conn   net.Conn
	status int
	reason string
}

// refuser answers connections the proxy will not serve from a fixed pool of goroutines.
type refuser struct {
	queue chan refusal
	done  chan struct{}

	mu      sync.Mutex
	stopped bool
}

func startRefuser() *refuser {
	r := &refuser{queue: make(chan refusal, refuseQueue), done: make(chan struct{})}
	for range refuseWorkers {
		go r.work()
	}
	return r
}

// refuse answers c with status and reason when a worker is free soon, or resets it.
func (r *refuser) refuse(c net.Conn, status int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		select {
		case r.queue <- refusal{conn: c, status: status, reason: reason}:
			return
		default:
		}
	}
	reset(c)
}

// stop ends the workers and resets what is still queued.
func (r *refuser) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	close(r.done)
	for {
		select {
		case q := <-r.queue:
			reset(q.conn)
		default:
			return
		}
	}
}

func (r *refuser) work() {
	buf := make([]byte, refuseBufBytes)
	for {
		select {
		case <-r.done:
			return
		case q := <-r.queue:
			answer(q, buf)
		}
	}
}

// answer reads the request head (bounded in time and size, into buf) and sends the refusal. A client that
// sends no complete head in time is reset.
func answer(q refusal, buf []byte) {
	c := q.conn
	_ = c.SetDeadline(time.Now().Add(refuseWait))
	if !readHead(c, buf) {
		reset(c)
		return
	}
	phrase := "airlock egress proxy: " + q.reason
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		q.status, phrase, len(phrase)+1, phrase)
	_ = c.Close()
}

// readHead reads from c until the end of a request head (an empty line), at most maxRequestHeadBytes, using
// only buf. It reports whether the head ended.
func readHead(c net.Conn, buf []byte) bool {
	var joint [6]byte // the previous read's last 3 bytes and this one's first 3: an empty line split across reads
	kept := 0
	for total := 0; total < maxRequestHeadBytes; {
		n, err := c.Read(buf)
		if n > 0 {
			total += n
			seen := append(joint[:kept], buf[:min(n, 3)]...)
			if endsHead(seen) || endsHead(buf[:n]) {
				return true
			}
			last := buf[:n]
			if n < 3 {
				last = seen // a short read: the previous bytes are still part of the last three
			}
			kept = copy(joint[:3], last[max(0, len(last)-3):])
		}
		if err != nil {
			return false
		}
	}
	return false
}

func endsHead(b []byte) bool {
	return bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// reset closes c with a TCP reset: nothing is kept for the peer, and the proxy holds nothing for it.
func reset(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}
