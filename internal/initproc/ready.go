package initproc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// readyServer is the readiness port: the kubelet's httpGet probe. It listens from PID 1's start, and holds each
// request until the gate passed (then 200) or for holdFor (then 503): so the kubelet's first probe, made as soon
// as it sees the container run, is answered the moment the gate passes instead of failing and waiting for the
// next period. Once passed, it answers 503 while healthy reports a problem (the supervisor cannot accept
// sessions). It reads at most a request's head and sends a fixed answer, nothing else.
type readyServer struct {
	ln      net.Listener
	passed  chan struct{}
	holdFor time.Duration
	log     io.Writer
	healthy func() error
}

const (
	// readyHold is below the probe's timeoutSeconds (internal/sandbox), and short: a probe that never gets an
	// answer costs its whole timeout before the next one, and a held one that ends in 503 only a moment.
	readyHold      = 1500 * time.Millisecond
	readyHeadLimit = 4 << 10
	readyOK        = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\ngate passed\n"
	readyPending   = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\ngate pending\n"
	readyUnhealthy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nunhealthy\n"
)

// listenReady opens the readiness port (nil without one).
func listenReady(port int, log io.Writer) (*readyServer, error) {
	if port == 0 {
		return nil, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("opening the readiness port: %w", err)
	}
	s := &readyServer{ln: ln, passed: make(chan struct{}), holdFor: readyHold, log: log}
	go s.serve()
	return s, nil
}

// pass says the gate passed: held and later requests get 200 while healthy says nil.
func (s *readyServer) pass(healthy func() error) {
	if s != nil {
		s.healthy = healthy
		close(s.passed)
	}
}

func (s *readyServer) serve() {
	var pause time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like pass: the probe must not die with them.
			if pause == 0 {
				fmt.Fprintln(s.log, "airlock-init pid1: readiness port:", err)
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		go s.answer(c)
	}
}

// answer reads the request's head (bounded in size and time), then answers once the gate passed or holdFor ends.
func (s *readyServer) answer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.holdFor + time.Second))
	head := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for !strings.Contains(string(head), "\r\n\r\n") {
		n, err := c.Read(buf)
		if err != nil || len(head)+n > readyHeadLimit {
			return
		}
		head = append(head, buf[:n]...)
	}
	reply := readyOK
	select {
	case <-s.passed:
		if s.healthy != nil && s.healthy() != nil {
			reply = readyUnhealthy
		}
	case <-time.After(s.holdFor):
		reply = readyPending
	}
	_, _ = io.WriteString(c, reply)
}
