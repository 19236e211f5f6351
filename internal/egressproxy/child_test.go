package egressproxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"airlock.dev/airlock/internal/allowlist"
	"airlock.dev/airlock/internal/testutil/child"
)

// Tests with tens of thousands of sockets run the proxy and the clients in child processes (this test binary
// again, by role): each has its own file descriptor table, so the clients and the proxy's accepted connections
// do not share one RLIMIT_NOFILE, and the proxy's memory and goroutines are its own to measure.
const (
	roleEnv   = "EGRESSPROXY_TEST_ROLE"
	configEnv = "EGRESSPROXY_TEST_CONFIG"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "proxy":
		os.Exit(runProxyChild())
	case "clients":
		os.Exit(runClientsChild())
	}
	os.Exit(m.Run())
}

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and returns it.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, nil
}

// startChild runs this test binary in role with config and returns it with its stdout; closing stdin ends it,
// and it dies with the test.
func startChild(t *testing.T, role string, config any) (*exec.Cmd, *bufio.Reader, io.WriteCloser) {
	t.Helper()
	b, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	cmd := child.DieWithParent(exec.Command(os.Args[0]))
	cmd.Env = append(os.Environ(), roleEnv+"="+role, configEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the %s child: %v", role, err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd, bufio.NewReader(out), in
}

// readLine reads the child's next line of stdout, failing the test if it does not come within a minute.
func readLine(t *testing.T, r *bufio.Reader, what string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, err := r.ReadString('\n')
		if err != nil {
			line = "error: " + err.Error()
		}
		got <- strings.TrimSpace(line)
	}()
	select {
	case line := <-got:
		return line
	case <-time.After(time.Minute):
		t.Fatalf("no line from the %s child within a minute", what)
		return ""
	}
}

// proxyConfig is the proxy child's configuration.
type proxyConfig struct {
	UpstreamPorts  []int
	MaxConnections int
	PerSource      int
	MemoryLimit    int64 // the GOMEMLIMIT cmd/egress-proxy sets in a container of that size (90%)
}

// loopbackDirectory treats every loopback address as a sandbox allowed to reach the upstream.
type loopbackDirectory struct{ allow allowlist.List }

func (d loopbackDirectory) Lookup(ip netip.Addr) (Client, error) {
	if !ip.IsLoopback() {
		return Client{}, fmt.Errorf("%s is no sandbox's pod", ip)
	}
	return Client{Namespace: "flood", Name: ip.String(), UID: ip.String(), Allow: d.allow}, nil
}

// childStats is what the proxy child reports of itself.
type childStats struct {
	Goroutines, PeakGoroutines int
	Heap, PeakHeap             uint64 // heap spans and goroutine stacks in use
	Open                       int
	Displaced, CapRefused      float64
	SourceRefused              float64
}

// runProxyChild serves the proxy as cmd/egress-proxy does, with its default limits, on loopback; prints
// "<proxy address> <stats address>", and serves /stats until stdin closes.
func runProxyChild() int {
	var cfg proxyConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "proxy child config:", err)
		return 2
	}
	if _, err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	debug.SetMemoryLimit(cfg.MemoryLimit)
	var entries []string
	for _, port := range cfg.UpstreamPorts {
		entries = append(entries, fmt.Sprintf("upstream.test:%d", port))
	}
	allow, err := allowlist.Parse(entries)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	proxy := &Proxy{
		Directory: loopbackDirectory{allow: allow},
		Dialer: &Dialer{Guard: NewGuard(nil, []netip.Prefix{netip.PrefixFrom(public, 32)}),
			Resolver: Hosts{"upstream.test": {public}}, Timeout: 5 * time.Second},
		Metrics:    metrics,
		Log:        logr.Discard(),
		TunnelIdle: 5 * time.Minute,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	limited := NewLimitListener(l, Limits{PerSource: cfg.PerSource, Total: cfg.MaxConnections}, metrics)
	go func() { _ = NewServer(proxy).Serve(limited) }()
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s := &statsSampler{limited: limited, metrics: metrics}
	go s.sample()
	go func() { _ = http.Serve(sl, http.HandlerFunc(s.serve)) }()
	fmt.Printf("%s %s\n", l.Addr(), sl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// statsSampler records the proxy child's peak goroutines and heap every few milliseconds.
type statsSampler struct {
	limited                  *LimitListener
	metrics                  *Metrics
	peakGoroutines, peakHeap atomic.Uint64
}

func (s *statsSampler) sample() {
	var m runtime.MemStats
	for range time.Tick(10 * time.Millisecond) {
		runtime.ReadMemStats(&m)
		storeMax(&s.peakHeap, m.HeapInuse+m.StackInuse)
		storeMax(&s.peakGoroutines, uint64(runtime.NumGoroutine()))
	}
}

func storeMax(v *atomic.Uint64, n uint64) {
	for old := v.Load(); n > old && !v.CompareAndSwap(old, n); old = v.Load() {
	}
}

// serve answers /stats; ?gc=1 collects first, so Heap is what is live; ?reset=1 restarts the peaks.
func (s *statsSampler) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if r.URL.Query().Get("reset") == "1" {
		s.peakHeap.Store(0)
		s.peakGoroutines.Store(0)
	}
	st := childStats{
		Goroutines: runtime.NumGoroutine(), PeakGoroutines: int(s.peakGoroutines.Load()),
		Heap: m.HeapInuse + m.StackInuse, PeakHeap: s.peakHeap.Load(),
		Open:          s.limited.Open(),
		Displaced:     countOf(s.metrics.displaced),
		CapRefused:    countOf(s.metrics.busy),
		SourceRefused: countOf(s.metrics.limited),
	}
	_ = json.NewEncoder(w).Encode(st)
}

func countOf(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// proxyChild is a running proxy child, seen from the test.
type proxyChild struct {
	cmd             *exec.Cmd
	addr, statsAddr string
}

func startProxyChild(t *testing.T, cfg proxyConfig) *proxyChild {
	t.Helper()
	cmd, out, _ := startChild(t, "proxy", cfg)
	fields := strings.Fields(readLine(t, out, "proxy"))
	if len(fields) != 2 {
		t.Fatalf("proxy child said %q, want its two addresses", fields)
	}
	return &proxyChild{cmd: cmd, addr: fields[0], statsAddr: fields[1]}
}

func (p *proxyChild) stats(t *testing.T, query string) childStats {
	t.Helper()
	resp, err := http.Get("http://" + p.statsAddr + "/stats?" + query)
	if err != nil {
		t.Fatalf("proxy child stats: %v", err)
	}
	defer resp.Body.Close()
	var st childStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("proxy child stats: %v", err)
	}
	return st
}

// peakRSS is the proxy child's high-water mark of resident memory (VmHWM), in bytes.
func (p *proxyChild) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in the proxy child's status")
	return 0
}

// clientGroup is a set of connections the clients child opens: perSource from each source address, each
// behaving as mode says.
type clientGroup struct {
	// idle: nothing sent; partial: most of a request head; tunnel: CONNECT, then nothing read; forward: a POST
	// with part of its body, then nothing sent nor read.
	Mode      string
	Sources   []string
	PerSource int
	Target    string // the upstream's host:port, for tunnel, partial and forward
	Path      string // forward's path on the upstream
}

type clientsConfig struct {
	Proxy  string
	Groups []clientGroup
}

// runClientsChild opens every group's connections (in order, each group complete before the next), prints
// "connected=<n> reset=<n> failed=<n> answered=<n>", and holds them until stdin closes. reset counts
// connections the proxy refused so fast that connecting reported the reset; answered, tunnels that got their 200.
func runClientsChild() int {
	var cfg clientsConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "clients child config:", err)
		return 2
	}
	if _, err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var held []net.Conn
	var mu sync.Mutex
	var reset, failed, answered atomic.Int64
	for _, g := range cfg.Groups {
		jobs := make(chan string)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for src := range jobs {
					c, ok, err := openClient(cfg.Proxy, src, g)
					if errors.Is(err, syscall.ECONNRESET) {
						reset.Add(1)
						continue
					}
					if err != nil {
						if failed.Add(1) <= 3 {
							fmt.Fprintln(os.Stderr, "clients child:", err)
						}
						continue
					}
					if ok {
						answered.Add(1)
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			})
		}
		for _, src := range g.Sources {
			for range g.PerSource {
				jobs <- src
			}
		}
		close(jobs)
		wg.Wait()
	}
	fmt.Printf("connected=%d reset=%d failed=%d answered=%d\n", len(held), reset.Load(), failed.Load(), answered.Load())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// openClient connects from src and behaves as g.Mode says; ok reports a tunnel's 200.
func openClient(proxy, src string, g clientGroup) (net.Conn, bool, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
	c, err := d.Dial("tcp", proxy)
	if err != nil {
		return nil, false, err
	}
	switch g.Mode {
	case "partial":
		// A head stalled short of its limit: the most a waiting connection's head can hold.
		_, _ = io.WriteString(c, "CONNECT "+g.Target+" HTTP/1.1\r\nX-Pad: "+strings.Repeat("a", maxRequestHeadBytes-256))
	case "tunnel":
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.WriteString(c, "CONNECT "+g.Target+" HTTP/1.1\r\nHost: "+g.Target+"\r\n\r\n")
		var line [64]byte // read no further than the status line, so the tunnel's data stays unread
		n, _ := io.ReadAtLeast(c, line[:], len("HTTP/1.1 200"))
		return c, strings.HasPrefix(string(line[:n]), "HTTP/1.1 200"), nil
	case "forward":
		_, _ = io.WriteString(c, "POST http://"+g.Target+g.Path+" HTTP/1.1\r\nHost: "+g.Target+"\r\nContent-Length: 1048576\r\n\r\n")
		_, _ = c.Write(make([]byte, 64<<10))
	}
	return c, false, nil
}

// clientsReport is what a clients child made of its connections.
type clientsReport struct {
	Connected, Reset, Failed, Answered int
}

func (r clientsReport) String() string {
	return fmt.Sprintf("connected=%d reset=%d failed=%d answered=%d", r.Connected, r.Reset, r.Failed, r.Answered)
}

// startClients runs a clients child and waits until it holds all its connections; it returns its report.
func startClients(t *testing.T, cfg clientsConfig) (report clientsReport, stop func()) {
	t.Helper()
	_, out, in := startChild(t, "clients", cfg)
	line := readLine(t, out, "clients")
	if _, err := fmt.Sscanf(line, "connected=%d reset=%d failed=%d answered=%d",
		&report.Connected, &report.Reset, &report.Failed, &report.Answered); err != nil {
		t.Fatalf("clients child said %q: %v", line, err)
	}
	return report, func() { _ = in.Close() }
}

// loopbackSources returns n distinct loopback addresses in 127.<net>.0.0/16, none of them 127.0.0.1.
func loopbackSources(network, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("127.%d.%d.%d", network, (i+1)/250, (i+1)%250+1)
	}
	return out
}
