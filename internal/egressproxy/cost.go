package egressproxy

// What one served connection may hold in the proxy's memory, whatever its client does. Every buffer below is
// fixed or capped, so the proxy's memory is bounded by its baseline plus MaxConnections × ConnectionCost plus
// the fixed cost of refusing (refuseWorkers, refuseQueue): a connection that would go over is never served.
// A connection is in one of three phases, and ConnectionCost is the largest:
//
//   - waiting for a request head (new, or keep-alive between plain HTTP requests): net/http's 4 KiB read and
//     4 KiB write buffers, a head of at most maxRequestHeadBytes (+4 KiB net/http allows past it) read and parsed
//     into a header map, and one goroutine;
//   - a CONNECT tunnel: the parsed head, the two buffers, two copy buffers and two goroutines;
//   - a plain HTTP request forwarded: the head and its copy sent upstream, the transport's 4 KiB read and write
//     buffers, the 32 KiB buffer package net copies a request body through, a response head of at most
//     maxResponseHeadBytes, one copy buffer, and up to five goroutines (the server's, its background reader,
//     the transport's reader and writer, a dialler that ends once dialled).
//
// Goroutine stacks are counted at goroutineStackBytes each: net/http's serve loop and the copy loops run well
// within it. TestConnectionCostBoundsEachPhase measures each phase at its worst against these counts. Kernel
// socket buffers are not Go memory and are not counted here (docs/network.md).
const (
	maxRequestHeadBytes  = 16 << 10
	maxResponseHeadBytes = 32 << 10
	copyBufferBytes      = 16 << 10
	serverBufferBytes    = 4<<10 + 4<<10
	headSlackBytes       = 4 << 10 // net/http reads up to 4 KiB past MaxHeaderBytes before refusing
	goroutineStackBytes  = 16 << 10
	connStructBytes      = 8 << 10  // net/http's conn, request and response, the upstream conn, wrappers
	bodyCopyBytes        = 32 << 10 // net's ReadFrom copies a request body to the upstream through its own buffer

	headBytes   = 2 * (maxRequestHeadBytes + headSlackBytes) // raw lines and their parsed copies
	waitingCost = serverBufferBytes + headBytes + goroutineStackBytes + connStructBytes
	tunnelCost  = serverBufferBytes + headBytes + 2*copyBufferBytes + 2*goroutineStackBytes + connStructBytes
	forwardCost = serverBufferBytes + 2*headBytes + serverBufferBytes + bodyCopyBytes + 2*maxResponseHeadBytes +
		copyBufferBytes + GoroutinesPerConnection*goroutineStackBytes + connStructBytes

	// ConnectionCost is the most one served connection may hold: 296 KiB, a forwarded request's.
	ConnectionCost = max(waitingCost, tunnelCost, forwardCost)

	// GoroutinesPerConnection is the most goroutines one served connection runs at once (a forwarded request).
	GoroutinesPerConnection = 5
)

// DefaultMaxConnections fits the chart's default 256 MiB memory limit: 512 × ConnectionCost is 148 MiB, which
// leaves room for the proxy's baseline (its caches of sandbox pods and Sandboxes, metrics, the Go runtime) and
// for the garbage collector's slack under the memory limit the proxy sets itself (cmd/egress-proxy).
const DefaultMaxConnections = 512

// MemoryBound is the most memory maxConnections served connections may hold, beyond the proxy's baseline.
func MemoryBound(maxConnections int) int64 {
	return int64(maxConnections)*ConnectionCost + refuseFixedCost
}

// MaxGoroutines is the most goroutines maxConnections served connections and the refusers run, beyond the
// proxy's baseline.
func MaxGoroutines(maxConnections int) int {
	return maxConnections*GoroutinesPerConnection + refuseWorkers
}
