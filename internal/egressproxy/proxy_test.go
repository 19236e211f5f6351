package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"airlock.dev/airlock/internal/allowlist"
)

// The tests run a real proxy against real listeners on loopback. 127.0.0.1 stands in for "the internet" (the
// guard permits it as an operator would an internal mirror); 127.0.0.3 stands in for a private address that
// must never be reached, and counts every connection it gets.
var (
	public  = netip.MustParseAddr("127.0.0.1")
	private = netip.MustParseAddr("127.0.0.3")
)

type staticDirectory map[netip.Addr]Client

func (d staticDirectory) Lookup(ip netip.Addr) (Client, error) {
	if c, ok := d[ip]; ok {
		return c, nil
	}
	return Client{}, fmt.Errorf("%s is no sandbox's pod", ip)
}

type recorded struct {
	allowed bool
	target  string
}

type memRecorder struct {
	mu  sync.Mutex
	got []recorded
}

func (r *memRecorder) Record(_ Client, allowed bool, target, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, recorded{allowed, target})
}

type fixture struct {
	proxyURL  *url.URL
	proxy     *Proxy
	server    *http.Server
	listener  *LimitListener
	upstream  *httptest.Server // plain HTTP on 127.0.0.1
	tlsServer *httptest.Server // TLS on 127.0.0.1
	port      int              // upstream's port; the private listener has the same one
	privHits  *atomic.Int64
	metrics   *Metrics
	recorder  *memRecorder
	resolver  Resolver
}

// newFixture starts the upstreams, a private listener on the upstream's port at 127.0.0.3 and the proxy, with
// maxConns per source and the default total cap.
func newFixture(t *testing.T, maxConns int, resolver func(port int) Resolver) *fixture {
	t.Helper()
	return newFixtureWithLimits(t, Limits{PerSource: maxConns, Total: DefaultMaxConnections}, resolver)
}

func newFixtureWithLimits(t *testing.T, limits Limits, resolver func(port int) Resolver) *fixture {
	t.Helper()
	f := &fixture{privHits: &atomic.Int64{}, recorder: &memRecorder{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello "+r.Host) })
	mux.HandleFunc("/bytes/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := make([]byte, 32<<10)
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		for i := 0; i < 1000; i++ {
			if _, err := w.Write(make([]byte, 1000)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
	})
	f.upstream = httptest.NewServer(mux)
	t.Cleanup(f.upstream.Close)
	f.tlsServer = httptest.NewTLSServer(mux)
	t.Cleanup(f.tlsServer.Close)
	f.port = f.upstream.Listener.Addr().(*net.TCPAddr).Port

	priv, err := net.Listen("tcp", netip.AddrPortFrom(private, uint16(f.port)).String())
	if err != nil {
		t.Fatalf("listening on the private stand-in: %v", err)
	}
	t.Cleanup(func() { priv.Close() })
	go func() {
		for {
			c, err := priv.Accept()
			if err != nil {
				return
			}
			f.privHits.Add(1)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nPRIVATE")
			c.Close()
		}
	}()

	tlsPort := f.tlsServer.Listener.Addr().(*net.TCPAddr).Port
	allow, err := allowlist.Parse([]string{
		fmt.Sprintf("pkg.test:%d", f.port), fmt.Sprintf("pkg.test:%d", tlsPort), fmt.Sprintf("*.wild.test:%d", f.port),
		fmt.Sprintf("rebind.test:%d", f.port), fmt.Sprintf("flip.test:%d", f.port), fmt.Sprintf("mixed.test:%d", f.port),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.metrics, err = NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f.resolver = resolver(f.port)
	f.proxy = &Proxy{
		Directory: staticDirectory{public: {Namespace: "tenant", Name: "sbx", Allow: allow}},
		Dialer: &Dialer{Guard: NewGuard(nil, []netip.Prefix{netip.PrefixFrom(public, 32)}),
			Resolver: f.resolver, Timeout: 2 * time.Second},
		Metrics:    f.metrics,
		Recorder:   f.recorder,
		Log:        logr.Discard(),
		TunnelIdle: time.Minute,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.server = NewServer(f.proxy)
	f.listener = NewLimitListener(l, limits, f.metrics)
	go func() { _ = f.server.Serve(f.listener) }()
	t.Cleanup(func() { _ = f.server.Close(); f.listener.Abort() })
	f.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	return f
}

func hostsResolver(port int) Resolver {
	return Hosts{
		"pkg.test":      {public},
		"a.wild.test":   {public},
		"rebind.test":   {private},
		"mixed.test":    {public, private},
		"other.test":    {public},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
	}
}

func (f *fixture) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(f.tlsServer.Certificate())
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(f.proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
}

func (f *fixture) get(t *testing.T, rawURL string) (int, string, error) {
	t.Helper()
	resp, err := f.client().Get(rawURL)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestForwardsPlainHTTPAndTunnelsTLSToAllowedHosts(t *testing.T) {
	f := newFixture(t, 16, hostsResolver)
	code, body, err := f.get(t, fmt.Sprintf("http://pkg.test:%d/hello?secret=1", f.port))
	if err != nil || code != 200 || body != fmt.Sprintf("hello pkg.test:%d", f.port) {
		t.Fatalf("plain HTTP: %d %q %v", code, body, err)
	}
	code, body, err = f.get(t, fmt.Sprintf("http://a.wild.test:%d/hello", f.port))
	if err != nil || code != 200 {
		t.Fatalf("wildcard: %d %q %v", code, body, err)
	}
	tlsPort := f.tlsServer.Listener.Addr().(*net.TCPAddr).Port
	code, body, err = f.get(t, fmt.Sprintf("https://pkg.test:%d/hello", tlsPort))
	if err != nil || code != 200 || !strings.HasPrefix(body, "hello") {
		t.Fatalf("CONNECT: %d %q %v", code, body, err)
	}
	code, _, err = f.get(t, fmt.Sprintf("http://pkg.test:%d/bytes/100000", f.port))
	if err != nil || code != 200 {
		t.Fatalf("download: %d %v", code, err)
	}
	// The proxy counts a chunk once written to the client, which may read it (and the test get here) first.
	received := f.metrics.bytes.WithLabelValues("tenant", "sbx", "received")
	for deadline := time.Now().Add(5 * time.Second); counterValue(t, received) < 100000 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := counterValue(t, received); got < 100000 {
		t.Errorf("received bytes counted %v, want at least 100000", got)
	}
	if got := counterValue(t, f.metrics.connections.WithLabelValues("tenant", "sbx", "allowed")); got != 4 {
		t.Errorf("allowed connections %v, want 4", got)
	}
	for _, r := range f.recorder.got {
		if strings.Contains(r.target, "secret") || strings.Contains(r.target, "/") {
			t.Errorf("recorded target %q carries more than host:port", r.target)
		}
	}
}

// deniedStatus sends a request through the proxy and returns the status line it got.
func (f *fixture) statusLine(t *testing.T, from netip.Addr, req string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", f.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the proxy's answer to %q: %v", req, err)
	}
	return strings.TrimSpace(line)
}

func TestRefusesWhatTheAllowlistDoesNotName(t *testing.T) {
	f := newFixture(t, 16, hostsResolver)
	for _, req := range []string{
		fmt.Sprintf("GET http://other.test:%d/hello HTTP/1.1\r\nHost: other.test\r\n\r\n", f.port),
		fmt.Sprintf("CONNECT other.test:%d HTTP/1.1\r\nHost: other.test\r\n\r\n", f.port),
		"CONNECT pkg.test:22 HTTP/1.1\r\nHost: pkg.test\r\n\r\n",                // listed, but not on this port
		fmt.Sprintf("GET /hello HTTP/1.1\r\nHost: pkg.test:%d\r\n\r\n", f.port), // not a proxy request
	} {
		if got := f.statusLine(t, public, req); !strings.HasPrefix(got, "HTTP/1.1 403 airlock egress proxy: ") && !strings.HasPrefix(got, "HTTP/1.1 400 airlock egress proxy: ") {
			t.Errorf("%q: got %q, want a 403/400 that says why", strings.SplitN(req, "\r", 2)[0], got)
		}
	}
	if got := f.statusLine(t, public, fmt.Sprintf("CONNECT other.test:%d HTTP/1.1\r\n\r\n", f.port)); !strings.Contains(got, "is not on sandbox tenant/sbx's allowlist") {
		t.Errorf("the refusal does not say why: %q", got)
	}
	if got := counterValue(t, f.metrics.connections.WithLabelValues("tenant", "sbx", "denied")); got != 5 {
		t.Errorf("denied connections %v, want 5", got)
	}
}

func TestRefusesCallersThatAreNoSandbox(t *testing.T) {
	f := newFixture(t, 16, hostsResolver)
	got := f.statusLine(t, netip.MustParseAddr("127.0.0.5"), fmt.Sprintf("GET http://pkg.test:%d/hello HTTP/1.1\r\nHost: pkg.test\r\n\r\n", f.port))
	if !strings.HasPrefix(got, "HTTP/1.1 403 airlock egress proxy: this proxy serves only Restricted sandboxes") {
		t.Errorf("unknown caller: %q", got)
	}
}

// TestNeverConnectsToBlockedAddresses: a private address by literal or by a listed name that resolves to
// one, or with one blocked address among its answers, is refused, and the private listener gets nothing.
func TestNeverConnectsToBlockedAddresses(t *testing.T) {
	f := newFixture(t, 16, hostsResolver)
	for _, c := range []struct{ req, want string }{
		{fmt.Sprintf("CONNECT 127.0.0.3:%d HTTP/1.1\r\n\r\n", f.port), "is not on sandbox"},
		{"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", "is not on sandbox"},
		{fmt.Sprintf("CONNECT rebind.test:%d HTTP/1.1\r\n\r\n", f.port), "rebind.test resolves to blocked address: 127.0.0.3"},
		{fmt.Sprintf("GET http://rebind.test:%d/hello HTTP/1.1\r\nHost: rebind.test\r\n\r\n", f.port), "blocked address: 127.0.0.3"},
		{fmt.Sprintf("CONNECT mixed.test:%d HTTP/1.1\r\n\r\n", f.port), "mixed.test resolves to blocked address: 127.0.0.3"},
	} {
		got := f.statusLine(t, public, c.req)
		if !strings.HasPrefix(got, "HTTP/1.1 403 ") || !strings.Contains(got, c.want) {
			t.Errorf("%q: got %q, want a 403 with %q", strings.SplitN(c.req, "\r", 2)[0], got, c.want)
		}
	}
	if n := f.privHits.Load(); n != 0 {
		t.Fatalf("the private listener got %d connections", n)
	}
}

// flipResolver answers with the public address the first time and the private one afterwards: DNS
// rebinding, where a name passes the check and then points elsewhere when the connection is made.
type flipResolver struct{ calls atomic.Int64 }

func (r *flipResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host != "flip.test" {
		return nil, errors.New("unknown")
	}
	if r.calls.Add(1) == 1 {
		return []netip.Addr{public}, nil
	}
	return []netip.Addr{private}, nil
}

func TestDNSRebindingCannotRedirectAConnection(t *testing.T) {
	res := &flipResolver{}
	f := newFixture(t, 16, func(int) Resolver { return res })
	code, body, err := f.get(t, fmt.Sprintf("http://flip.test:%d/hello", f.port))
	if err != nil || code != 200 || !strings.HasPrefix(body, "hello") {
		t.Fatalf("got %d %q %v, want the public upstream's answer", code, body, err)
	}
	if n := f.privHits.Load(); n != 0 {
		t.Fatalf("a rebinding name reached the private listener (%d connections, %d lookups)", n, res.calls.Load())
	}
}

func TestGuardRanges(t *testing.T) {
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")}, nil)
	for ip, blocked := range map[string]bool{
		"127.0.0.1": true, "10.96.0.1": true, "172.16.5.4": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "224.0.0.1": true, "::1": true, "fe80::1": true, "fd00::1": true,
		"::ffff:10.0.0.1": true, "64:ff9b::a00:1": true, "203.0.113.200": true,
		"203.0.113.20": false, "8.8.8.8": false, "2606:4700::1111": false,
	} {
		err := g.Check(netip.MustParseAddr(ip))
		if (err != nil) != blocked {
			t.Errorf("%s: blocked=%v, want %v (%v)", ip, err != nil, blocked, err)
		}
	}
}

// TestConnectionLimitPerSandbox: the fourth connection from one sandbox, with three open, gets a 429 and
// nothing else; once one closes, the next is served.
func TestConnectionLimitPerSandbox(t *testing.T) {
	f := newFixture(t, 3, hostsResolver)
	connect := fmt.Sprintf("CONNECT pkg.test:%d HTTP/1.1\r\n\r\n", f.port)
	var open []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", f.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, connect)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "200") {
			t.Fatalf("tunnel: %q %v", line, err)
		}
		open = append(open, c)
	}
	if got := f.statusLine(t, public, connect); !strings.HasPrefix(got, "HTTP/1.1 429 airlock egress proxy: too many connections") {
		t.Fatalf("fourth connection: %q, want a 429", got)
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := f.statusLine(t, public, connect)
		if strings.Contains(got, " 200 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing one tunnel: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := counterValue(t, f.metrics.limited); got < 1 {
		t.Errorf("limit refusals counted %v", got)
	}
}

// TestMemoryStaysBoundedUnderConcurrentDownloads: 100 downloads of 4 MiB at once, half tunnelled and half
// forwarded, keep the heap far below what holding them would take (400 MiB).
func TestMemoryStaysBoundedUnderConcurrentDownloads(t *testing.T) {
	f := newFixture(t, 200, hostsResolver)
	const n, size = 100, 4 << 20
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	tlsPort := f.tlsServer.Listener.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	errs := make(chan error, n)
	client := f.client()
	for i := range n {
		u := fmt.Sprintf("http://pkg.test:%d/bytes/%d", f.port, size)
		if i%2 == 1 {
			u = fmt.Sprintf("https://pkg.test:%d/bytes/%d", tlsPort, size)
		}
		wg.Go(func() {
			resp, err := client.Get(u)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			got, err := io.Copy(io.Discard, resp.Body)
			if err != nil || got != size {
				errs <- fmt.Errorf("%s: %d bytes, %v", u, got, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap in use grew by at most %d MiB for %d concurrent downloads of %d MiB", growth>>20, n, size>>20)
	if growth > 96<<20 {
		t.Fatalf("heap grew by %d MiB: the proxy holds what it carries", growth>>20)
	}
}

// TestAbortEndsDownloadsWithAnError: a proxy shutting down mid-download resets its connections, so even a
// client that reads slowly gets an error at once, not a hang: a plain close would first deliver the megabytes
// buffered in the sockets, which a proxy pod that is gone by then never does.
func TestAbortEndsDownloadsWithAnError(t *testing.T) {
	f := newFixture(t, 16, hostsResolver)
	tlsPort := f.tlsServer.Listener.Addr().(*net.TCPAddr).Port
	client := f.client()
	var bodies []io.ReadCloser
	for _, u := range []string{fmt.Sprintf("http://pkg.test:%d/bytes/200000000", f.port), fmt.Sprintf("https://pkg.test:%d/bytes/200000000", tlsPort)} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		bodies = append(bodies, resp.Body)
	}
	time.Sleep(300 * time.Millisecond) // the sockets' buffers fill
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = f.server.Shutdown(ctx) // the downloads outlast the grace
	f.listener.Abort()
	for i, b := range bodies {
		start := time.Now()
		buf := make([]byte, 1024)
		var err error
		for err == nil && time.Since(start) < 10*time.Second {
			_, err = b.Read(buf)
			time.Sleep(time.Millisecond) // a slow reader: 1 KB/ms
		}
		if err == nil || err == io.EOF {
			t.Errorf("download %d: %v after the proxy went away, want an error", i, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("download %d: the error took %s", i, took)
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
