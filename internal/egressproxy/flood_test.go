package egressproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// containerMemory is the chart's default memory limit for the proxy; the proxy child runs with the
// GOMEMLIMIT cmd/egress-proxy sets in such a container.
const containerMemory = 256 << 20

// TestIdleFloodStaysWithinBounds: 20,000 clients from 381 loopback addresses, all connected at once, against
// the proxy configured as for a 256 MiB container (the default --max-connections and
// --max-connections-per-sandbox): idle connections, heads stalled just short of their limit, 1,000
// connections from one address (over its cap), and 200 tunnels whose client reads nothing while the upstream
// pushes. The proxy serves its maximum and refuses or displaces the rest; its goroutines, heap and resident
// memory stay within the bounds cost.go computes, and a sandbox that connects while the flood holds is served.
// The clients run in two child processes of 10,000 each and the proxy in a third, so no process needs more
// than 20,000 descriptors (the hard RLIMIT_NOFILE here; each raises its soft limit to it).
//
// Fails without the global cap and the refuser pool (a goroutine for every connection, and one living 2 s for
// every refused one): checked, peak goroutines ~20,000.
func TestIdleFloodStaysWithinBounds(t *testing.T) {
	if _, err := raiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	push := startPusher(t)
	p := startProxyChild(t, proxyConfig{UpstreamPorts: []int{push.port}, MaxConnections: DefaultMaxConnections,
		PerSource: 64, MemoryLimit: containerMemory / 10 * 9})
	base := p.stats(t, "gc=1&reset=1")
	target := fmt.Sprintf("upstream.test:%d", push.port)

	reportB, _ := startClients(t, clientsConfig{Proxy: p.addr, Groups: []clientGroup{
		{Mode: "tunnel", Sources: loopbackSources(2, 4), PerSource: 50, Target: target},
		{Mode: "idle", Sources: []string{"127.0.0.2"}, PerSource: 1000},
		{Mode: "partial", Sources: loopbackSources(3, 176), PerSource: 50, Target: target},
	}})
	reportA, _ := startClients(t, clientsConfig{Proxy: p.addr, Groups: []clientGroup{
		{Mode: "idle", Sources: loopbackSources(1, 200), PerSource: 50},
	}})
	during := p.stats(t, "")
	t.Logf("clients: [%s] [%s]; proxy: %d open, %.0f displaced, %.0f refused at the cap, %.0f over a sandbox's cap",
		reportB, reportA, during.Open, during.Displaced, during.CapRefused, during.SourceRefused)
	// A connection refused at once may already be reset when connecting returns: it counts as made.
	if made := reportA.Connected + reportA.Reset + reportB.Connected + reportB.Reset; made != 20000 ||
		reportA.Failed+reportB.Failed != 0 || reportB.Answered != 200 {
		t.Errorf("the flood did not make 20,000 connections with 200 tunnels: [%s] [%s]", reportB, reportA)
	}
	if during.Open != DefaultMaxConnections {
		t.Errorf("the proxy serves %d connections during the flood, want its maximum %d", during.Open, DefaultMaxConnections)
	}

	// A sandbox that connects now is served: it displaces the connection that has waited longest for a request.
	if err := tunnelThrough(p.addr, target); err != nil {
		t.Errorf("a sandbox connecting during the flood: %v", err)
	}

	after := p.stats(t, "")
	rss := p.peakRSS(t)
	t.Logf("proxy peaks: %d goroutines (baseline %d), heap and stacks %d MiB (baseline %d MiB), resident %d MiB",
		after.PeakGoroutines, base.Goroutines, after.PeakHeap>>20, base.Heap>>20, rss>>20)
	if limit := base.Goroutines + MaxGoroutines(DefaultMaxConnections); after.PeakGoroutines > limit {
		t.Errorf("peak goroutines %d, over the bound %d", after.PeakGoroutines, limit)
	}
	if limit := base.Heap + uint64(MemoryBound(DefaultMaxConnections)); after.PeakHeap > limit {
		t.Errorf("peak heap and stacks %d MiB, over the bound %d MiB", after.PeakHeap>>20, limit>>20)
	}
	switch {
	case raceEnabled:
		t.Log("resident memory not checked: the race detector's shadow memory counts in it")
	case rss > containerMemory:
		t.Errorf("peak resident memory %d MiB, over the container's %d MiB", rss>>20, containerMemory>>20)
	}
}

// TestConnectionCostBoundsEachPhase: 200 connections in each phase, at its most expensive (a head stalled
// just short of its limit; a tunnel whose client reads nothing while the upstream pushes; a forwarded request
// whose body stalls midway, whose response head is near its limit and whose client reads nothing), hold no
// more live memory each than cost.go counts for that phase. It checks the cost model the bounds rest on.
func TestConnectionCostBoundsEachPhase(t *testing.T) {
	if _, err := raiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	push := startPusher(t)
	web := startBigHeadServer(t)
	p := startProxyChild(t, proxyConfig{UpstreamPorts: []int{push.port, web.port}, MaxConnections: DefaultMaxConnections,
		PerSource: 64, MemoryLimit: containerMemory / 10 * 9})
	const n = 200
	for _, phase := range []struct {
		group clientGroup
		cost  int64
	}{
		{clientGroup{Mode: "partial", Target: fmt.Sprintf("upstream.test:%d", push.port)}, waitingCost},
		{clientGroup{Mode: "tunnel", Target: fmt.Sprintf("upstream.test:%d", push.port)}, tunnelCost},
		{clientGroup{Mode: "forward", Target: fmt.Sprintf("upstream.test:%d", web.port), Path: "/big-head"}, forwardCost},
	} {
		t.Run(phase.group.Mode, func(t *testing.T) {
			base := p.stats(t, "gc=1")
			g := phase.group
			g.Sources, g.PerSource = loopbackSources(4, n/50), 50
			report, stop := startClients(t, clientsConfig{Proxy: p.addr, Groups: []clientGroup{g}})
			defer waitOpen(t, p, 0)
			defer stop()
			waitOpen(t, p, n)
			time.Sleep(time.Second) // buffers fill: the upstreams push until the proxy's writes block
			held := p.stats(t, "gc=1")
			each := (int64(held.Heap) - int64(base.Heap)) / n
			t.Logf("%s (%s): %d KiB live per connection, %d goroutines per connection; counted %d KiB",
				g.Mode, report, each>>10, (held.Goroutines-base.Goroutines)/n, phase.cost>>10)
			if each > phase.cost {
				t.Errorf("a %s connection holds %d KiB, more than the %d KiB counted", g.Mode, each>>10, phase.cost>>10)
			}
			if per := (held.Goroutines - base.Goroutines) / n; per > GoroutinesPerConnection {
				t.Errorf("a %s connection runs %d goroutines, more than the %d counted", g.Mode, per, GoroutinesPerConnection)
			}
		})
	}
}

// waitOpen waits until the proxy child serves n connections.
func waitOpen(t *testing.T, p *proxyChild, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := p.stats(t, "")
		if st.Open == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy serves %d connections, want %d", st.Open, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tunnelThrough opens a tunnel to target from 127.0.0.1 and reads 64 KiB of what the upstream sends.
func tunnelThrough(proxy, target string) error {
	c, err := net.DialTimeout("tcp", proxy, 30*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("reading the answer to CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT answered %s", resp.Status)
	}
	if _, err := io.CopyN(io.Discard, br, 64<<10); err != nil {
		return fmt.Errorf("reading through the tunnel: %w", err)
	}
	return nil
}

// pusher is an upstream that sends bytes to every connection as fast as it takes them, until closed.
type pusher struct {
	port int
}

func startPusher(t *testing.T) *pusher {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return &pusher{port: l.Addr().(*net.TCPAddr).Port}
}

// bigHeadServer answers /big-head with a response head near the proxy's limit and a body without end.
type bigHeadServer struct {
	port int
}

func startBigHeadServer(t *testing.T) *bigHeadServer {
	t.Helper()
	pad := strings.Repeat("b", maxResponseHeadBytes-2<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pad", pad)
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.CloseClientConnections) // first: the handlers write until their connection goes
	return &bigHeadServer{port: srv.Listener.Addr().(*net.TCPAddr).Port}
}
