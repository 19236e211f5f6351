package podexec

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peakHeap samples the heap in use until the returned stop is called, which
// reports the peak growth over the starting point.
func peakHeap() (stop func() uint64) {
	// Collect often while measuring, so that the peak is what is held, not garbage the default pacing (heap
	// twice the live set) lets pile up from the in-process server's buffers.
	gcPercent := debug.SetGCPercent(10)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		debug.SetGCPercent(gcPercent)
		return peak - base
	}
}

// 100 MiB of stdout through the engine (and, in this process, the server):
// memory stays bounded and the kept head/tail are exact.
func TestEngineFloodBoundedMemory(t *testing.T) {
	const total = 100 << 20
	for _, p := range []Protocol{ProtocolWebSocket, ProtocolSPDY} {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, nil)
			stop := peakHeap()
			start := time.Now()
			res := env.run(t, Request{Shell: "yes | head -c 100M", Timeout: 2 * time.Minute})
			grew := stop()
			t.Logf("%s: 100 MiB in %v, heap peak +%d KiB", p, time.Since(start).Round(time.Millisecond), grew>>10)
			if res.Outcome != OutcomeExited || res.ExitCode != 0 || res.StdoutBytes != total || res.Trailer.StdoutBytes != total {
				t.Fatalf("%+v", res)
			}
			path := res.Truncation.Stdout.FullOutputPath
			want := strings.Repeat("y\n", 512) + marker("stdout", path, total-DefaultKeepBytes) + strings.Repeat("y\n", (DefaultKeepBytes-1024)/2)
			if res.Stdout != want {
				t.Fatalf("kept output differs: %d bytes vs %d", len(res.Stdout), len(want))
			}
			// Generous: the point is that nothing near 100 MiB is held.
			if grew > 24<<20 {
				t.Fatalf("heap grew by %d MiB", grew>>20)
			}
		})
	}
}

// Non-periodic output, so head and tail must be exactly the right bytes.
func TestEngineFloodExactHeadTail(t *testing.T) {
	var sb strings.Builder
	for i := 1; i <= 2000000; i++ {
		sb.WriteString(strconv.Itoa(i))
		sb.WriteByte('\n')
	}
	full := sb.String()
	env := newEnv(t, ProtocolAuto, nil)
	res := env.run(t, Request{Argv: []string{"seq", "1", "2000000"}, KeepBytes: 4096, HeadBytes: 512})
	path := res.Truncation.Stdout.FullOutputPath
	want := full[:512] + marker("stdout", path, int64(len(full)-4096)) + full[len(full)-3584:]
	if res.Stdout != want || res.StdoutBytes != int64(len(full)) {
		t.Fatalf("kept output differs (%d vs %d bytes)", len(res.Stdout), len(want))
	}
}
