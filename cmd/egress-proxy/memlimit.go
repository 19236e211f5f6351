package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"airlock.dev/airlock/internal/egressproxy"
)

// cgroupMemoryMax is where cgroup v2 gives the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// setMemoryLimit makes the garbage collector hold the heap under 90% of the container's memory limit, unless
// GOMEMLIMIT is set: left alone it lets the heap grow to twice what is live before collecting, and a container
// sized for what the connections may hold at most (egressproxy.MemoryBound) would be killed first. It warns when
// --max-connections may hold more than 60% of the limit: the rest is for the proxy's baseline (its caches, the
// runtime) and the collector's slack.
func setMemoryLimit(maxConns int, log logr.Logger) {
	limit, ok := containerMemoryLimit()
	if !ok {
		return
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit / 10 * 9)
	}
	if bound := egressproxy.MemoryBound(maxConns); bound > limit/5*3 {
		log.Info("WARNING: --max-connections may hold more than 60% of the memory limit; lower it or raise the limit",
			"maxConnections", maxConns, "connectionMemoryBoundMiB", bound>>20, "memoryLimitMiB", limit>>20)
	}
}

// containerMemoryLimit reads the cgroup v2 memory limit; false when there is none or it cannot be read.
func containerMemoryLimit() (int64, bool) {
	b, err := os.ReadFile(cgroupMemoryMax)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0, false // "max": no limit
	}
	return n, true
}
