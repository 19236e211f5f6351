package benchstat

import (
	"os"
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
