package podexec

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/execserver"
)

// BenchmarkIdleSessions is what a session costs while it is open and unused: N sessions (one per "sandbox";
// the local exec server maps every pod to one PID 1) held by one engine. Measured per session: the Go heap and
// goroutines of this process, which holds the engine but also the stand-in API server (WebSocket to SPDY
// translation) and kubelet (AIRLOCK_BENCH_HEAP_PROFILE=FILE writes a heap profile to split them), and PID 1's
// resident memory. CPU while idle is the HTTP/2 health ping only (every 30 s).
// Run: go test ./internal/podexec -run '^$' -bench IdleSessions -benchtime 1x
func BenchmarkIdleSessions(b *testing.B) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	for b.Loop() {
		env := newEnv(b, ProtocolWebSocket, func(_ *execserver.Options, eo *Options) { eo.MaxSessions = n + 1 })
		heap0, gr0, rss0 := heapInuse(), runtime.NumGoroutine(), rssOf(env.srv.SupervisorPID())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		for i := range n {
			req := env.keyed(Request{Namespace: "ns", Pod: fmt.Sprintf("sandbox-%d", i), Argv: []string{"true"}})
			if _, err := env.eng.Run(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		cancel()
		time.Sleep(time.Second)
		heap1, gr1, rss1 := heapInuse(), runtime.NumGoroutine(), rssOf(env.srv.SupervisorPID())
		if path := os.Getenv("AIRLOCK_BENCH_HEAP_PROFILE"); path != "" { // to split the heap by side
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
		b.ReportMetric(float64(heap1-heap0)/float64(n)/1024, "inprocess-heap-KiB/session")
		b.ReportMetric(float64(gr1-gr0)/float64(n), "inprocess-goroutines/session")
		b.ReportMetric(float64(rss1-rss0)/float64(n)/1024, "pid1-rss-KiB/session")
		b.Logf("%d idle sessions: heap (engine, stand-in API server and kubelet) %+.1f MiB, %+d goroutines; PID 1 RSS %+.1f MiB", n,
			float64(heap1-heap0)/(1<<20), gr1-gr0, float64(rss1-rss0)/(1<<20))
		env.eng.Close()
	}
}

func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// rssOf is a process's resident memory in bytes (0 if unknown).
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
