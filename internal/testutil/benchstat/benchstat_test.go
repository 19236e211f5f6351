package benchstat

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	d := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	for p, want := range map[int]time.Duration{0: time.Millisecond, 50: 3 * time.Millisecond, 90: 5 * time.Millisecond, 100: 5 * time.Millisecond} {
		if got := Percentile(d, p); got != want {
			t.Errorf("p%d = %s, want %s", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
}

// This process has a peak RSS and has used CPU; a process that does not exist is an error, not zero.
func TestProcessFigures(t *testing.T) {
	for start := time.Now(); time.Since(start) < 30*time.Millisecond; {
	}
	if rss, err := PeakRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Errorf("PeakRSS = %d, %v", rss, err)
	}
	if cpu, err := CPUTime(os.Getpid()); err != nil || cpu <= 0 {
		t.Errorf("CPUTime = %s, %v", cpu, err)
	}
	if _, err := PeakRSS(1 << 30); err == nil {
		t.Error("no error for a missing process")
	}
}

func TestCPUBusySeesASpinningCore(t *testing.T) {
	var stop atomic.Bool
	go func() {
		for !stop.Load() { // spins a core on purpose
		}
	}()
	busy, err := CPUBusy(300 * time.Millisecond)
	stop.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	// One of NumCPU cores spins the whole window (or the machine is busier still).
	if want := 0.8 / float64(runtime.NumCPU()); busy < want || busy > 1 {
		t.Errorf("CPUBusy = %.2f with a core spinning, want between %.2f and 1", busy, want)
	}
}
