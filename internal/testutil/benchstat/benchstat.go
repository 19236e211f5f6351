// Package benchstat holds what the benchmarks measure the same way: a process's peak memory and CPU time
// from /proc, the API server's request counts, and percentiles.
package benchstat

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// PeakRSS is the process's high-water resident set size (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process status: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmHWM %q: %w", f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// CPUTime is the process's user + system CPU time so far (/proc/PID/stat, in clock ticks of 10 ms).
func CPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process stat: %w", err)
	}
	// The command name may hold spaces: the fields after it start at the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// Requests are API requests served, from apiserver_request_total: writes (POST, PUT, PATCH, APPLY, DELETE)
// and the rest (a watch counts once).
type Requests struct{ Writes, Other float64 }

// APIRequests reads the API server's request counters.
func APIRequests(cfg *rest.Config) (Requests, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return Requests{}, err
	}
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/metrics")
	if err != nil {
		return Requests{}, fmt.Errorf("API server metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Requests{}, fmt.Errorf("API server metrics: %s: %s", resp.Status, body)
	}
	var r Requests
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, `verb="POST"`), strings.Contains(line, `verb="PUT"`), strings.Contains(line, `verb="PATCH"`),
			strings.Contains(line, `verb="APPLY"`), strings.Contains(line, `verb="DELETE"`):
			r.Writes += v
		default:
			r.Other += v
		}
	}
	if err := sc.Err(); err != nil {
		return Requests{}, fmt.Errorf("reading API server metrics: %w", err)
	}
	return r, nil
}

// Percentile is the p-th percentile (nearest rank) of d, rounded to the millisecond: 0 the minimum, 100 the
// maximum.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(time.Millisecond)
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, for a benchmark's log.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// CPUBusy is the share of the machine's CPU time (all cores, 0..1) spent working (not idle, iowait or stolen)
// over the next window.
func CPUBusy(window time.Duration) (float64, error) {
	return CPUBusyDuring(func() { time.Sleep(window) })
}

// CPUBusyDuring is CPUBusy over the time f runs.
func CPUBusyDuring(f func()) (float64, error) {
	busy0, total0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	f()
	busy1, total1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if total1 <= total0 {
		return 0, nil
	}
	return float64(busy1-busy0) / float64(total1-total0), nil
}

// WaitQuiet waits until the machine's CPU is busy less than below (0..1) over a whole second, for at most
// limit, so that a round does not measure the previous round's teardown. It returns how long it waited and the
// last second's busy share; quiet is false when limit ran out first.
func WaitQuiet(below float64, limit time.Duration) (waited time.Duration, busy float64, quiet bool) {
	start := time.Now()
	for time.Since(start) < limit {
		b, err := CPUBusy(time.Second)
		if err != nil {
			return time.Since(start), 0, false
		}
		if busy = b; b < below {
			return time.Since(start), b, true
		}
	}
	return time.Since(start), busy, false
}

// cpuTimes reads the aggregate cpu line of /proc/stat: busy and total jiffies.
func cpuTimes() (busy, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("reading /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("unexpected /proc/stat first line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is already in user. Steal is the
	// hypervisor's, not this machine's work: it counts in the total only.
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing /proc/stat %q: %w", line, err)
		}
		total += v
		if i != 3 && i != 4 && i != 7 {
			busy += v
		}
	}
	return busy, total, nil
}
