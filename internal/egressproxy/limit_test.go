package egressproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// dialFrom connects to the proxy from a loopback source address.
func (f *fixture) dialFrom(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", f.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openTunnel opens a CONNECT tunnel from a source address and returns it once established.
func (f *fixture) openTunnel(t *testing.T, from string) net.Conn {
	t.Helper()
	c := f.dialFrom(t, from)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT pkg.test:%d HTTP/1.1\r\n\r\n", f.port)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("tunnel from %s: %q %v", from, line, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// closedByProxy reports whether the proxy closed c (a read ends with an error or EOF within a second).
func closedByProxy(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitOpenIn waits until the listener serves n connections (the server registers them as it accepts).
func waitOpenIn(t *testing.T, l *LimitListener, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); l.Open() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy serves %d connections, want %d", l.Open(), n)
		}
	}
}

// TestTotalCapDisplacesTheLongestWaiting: at the total cap, held by idle connections from one address, a
// sandbox that connects from another is served, and the idle connection that waited longest is the one closed.
// Fails without displacement (the newcomer gets a 503): checked.
func TestTotalCapDisplacesTheLongestWaiting(t *testing.T) {
	f := newFixtureWithLimits(t, Limits{PerSource: 16, Total: 3}, hostsResolver)
	var idle []net.Conn
	for range 3 {
		idle = append(idle, f.dialFrom(t, "127.0.0.5"))
		waitOpenIn(t, f.listener, len(idle))
	}
	code, body, err := f.get(t, fmt.Sprintf("http://pkg.test:%d/hello", f.port))
	if err != nil || code != 200 || !strings.HasPrefix(body, "hello") {
		t.Fatalf("a sandbox connecting at the cap: %d %q %v, want it served", code, body, err)
	}
	if !closedByProxy(idle[0]) {
		t.Error("the longest-waiting idle connection is still open")
	}
	for i, c := range idle[1:] {
		if closedByProxy(c) {
			t.Errorf("idle connection %d was closed, want only the oldest", i+1)
		}
	}
	if got := counterValue(t, f.metrics.displaced); got != 1 {
		t.Errorf("displaced connections counted %v, want 1", got)
	}
}

// TestTotalCapRefusesWhatCannotDisplace: tunnels are never displaced, nor a source's connections by a source
// that would then hold more; such a newcomer gets a prompt 503 that says why. Fails without the total cap
// (the newcomer is served): checked.
func TestTotalCapRefusesWhatCannotDisplace(t *testing.T) {
	f := newFixtureWithLimits(t, Limits{PerSource: 16, Total: 3}, hostsResolver)
	tunnels := []net.Conn{f.openTunnel(t, "127.0.0.1"), f.openTunnel(t, "127.0.0.1")}
	idle := f.dialFrom(t, "127.0.0.5")
	waitOpenIn(t, f.listener, 3)
	// 127.0.0.1 would hold 3: it may not displace 127.0.0.5's one, and nobody may displace a tunnel.
	got := f.statusLine(t, public, fmt.Sprintf("CONNECT pkg.test:%d HTTP/1.1\r\n\r\n", f.port))
	if !strings.HasPrefix(got, "HTTP/1.1 503 airlock egress proxy: the proxy is serving its maximum of 3 connections") {
		t.Fatalf("a connection over the total cap: %q, want a 503 that says why", got)
	}
	if closedByProxy(idle) {
		t.Error("the idle connection of the source holding fewer was closed")
	}
	for i, c := range tunnels {
		if closedByProxy(c) {
			t.Errorf("tunnel %d was closed", i)
		}
	}
	if got := counterValue(t, f.metrics.busy); got != 1 {
		t.Errorf("refusals at the cap counted %v, want 1", got)
	}
}

// TestRefusingCostsAFixedNumberOfGoroutines: 1,000 connections over a sandbox's cap that send nothing add no
// more goroutines than the refusers. Fails with a goroutine per refused connection: checked (+1,000).
func TestRefusingCostsAFixedNumberOfGoroutines(t *testing.T) {
	f := newFixture(t, 1, hostsResolver)
	f.dialFrom(t, "127.0.0.5")
	waitOpenIn(t, f.listener, 1)
	before := runtime.NumGoroutine()
	peak := before
	for range 1000 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
		c, err := d.Dial("tcp", f.proxyURL.Host)
		if err != nil {
			continue // refused so fast that connecting saw the reset
		}
		defer c.Close()
		peak = max(peak, runtime.NumGoroutine())
	}
	time.Sleep(100 * time.Millisecond) // the last accepted are handed to the refusers
	peak = max(peak, runtime.NumGoroutine())
	if grown := peak - before; grown > refuseWorkers {
		t.Fatalf("refusing 1,000 idle connections grew goroutines by %d, want at most %d", grown, refuseWorkers)
	}
	if got := counterValue(t, f.metrics.limited); got < 1000 {
		t.Errorf("refusals over a sandbox's cap counted %v, want 1000", got)
	}
}

// TestReadHeadFindsTheEndAcrossReads: the refusers answer once the head is read, wherever the reads split it.
func TestReadHeadFindsTheEndAcrossReads(t *testing.T) {
	for _, chunks := range [][]string{
		{"CONNECT a:443 HTTP/1.1\r\n\r\n"},
		{"CONNECT a:443 HTTP/1.1\r\n\r", "\n"},
		{"CONNECT a:443 HTTP/1.1\r\n", "\r\n"},
		{"CONNECT a:443 HTTP/1.1\r", "\n", "\r", "\n"},
		{"GET http://a/ HTTP/1.1\n\n"},
		{"GET http://a/ HTTP/1.1\n", "\n"},
	} {
		server, client := net.Pipe()
		go func() {
			for _, c := range chunks {
				_, _ = io.WriteString(client, c)
			}
		}()
		_ = server.SetDeadline(time.Now().Add(time.Second))
		if !readHead(server, make([]byte, refuseBufBytes)) {
			t.Errorf("%q: the end of the head was not found", chunks)
		}
		server.Close()
		client.Close()
	}
	server, client := net.Pipe()
	defer client.Close()
	go func() {
		_, _ = io.WriteString(client, "CONNECT a:443 HTTP/1.1\r\nX-Pad: "+strings.Repeat("a", maxRequestHeadBytes))
	}()
	_ = server.SetDeadline(time.Now().Add(time.Second))
	if readHead(server, make([]byte, refuseBufBytes)) {
		t.Error("a head longer than its limit was read to an end")
	}
}

// TestKeepAliveConnectionIsDisplaceableBetweenRequests: a plain HTTP connection kept alive after its response
// waits like a new one, so at the cap a sandbox connecting from elsewhere displaces it. Fails without the
// return to waiting (the newcomer gets a 503): checked.
func TestKeepAliveConnectionIsDisplaceableBetweenRequests(t *testing.T) {
	f := newFixtureWithLimits(t, Limits{PerSource: 16, Total: 1}, hostsResolver)
	kept := f.dialFrom(t, "127.0.0.1")
	_ = kept.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(kept, "GET http://pkg.test:%d/hello HTTP/1.1\r\nHost: pkg.test\r\n\r\n", f.port)
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("a kept-alive request: %v %v", resp, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	// Served, not refused at the cap: the handler answers (127.0.0.6 is no sandbox's address in the fixture).
	got := f.statusLine(t, netip.MustParseAddr("127.0.0.6"), fmt.Sprintf("CONNECT pkg.test:%d HTTP/1.1\r\n\r\n", f.port))
	if !strings.HasPrefix(got, "HTTP/1.1 403 airlock egress proxy: this proxy serves only Restricted sandboxes") {
		t.Fatalf("a connection at the cap held by a kept-alive connection: %q, want it served", got)
	}
	if !closedByProxy(kept) {
		t.Error("the kept-alive connection is still open")
	}
}
