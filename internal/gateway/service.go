package gateway

import "time"

// The service layer is what the gateway does for a tenant, whatever the transport: create, list, get and
// delete sandboxes (service_sandboxes.go), run commands (service_commands.go), move files
// (service_files.go). The REST handlers decode HTTP and encode JSON around it; MCP's tools (mcp.go) call it
// directly, so tenancy, quotas and rates, exec slots, the memory budget, audit, activity and secret masking
// are one code path for both. Its calls take a context, the caller's principal and plain values, and return
// values and an *Error. Background processes (processes.go) and timeouts (sandboxes.go) have no MCP tool and
// stay in their handlers.

// callHooks let a transport act at points of a call that only the service knows.
type callHooks struct {
	// admitted runs once the call holds its exec slot and memory, with how long it may take from now.
	admitted func(time.Duration)
	// chunk receives a command's output as it arrives, masked (nil: the output is only in the result).
	chunk func(ChunkLine) error
}

func (h callHooks) admit(d time.Duration) {
	if h.admitted != nil {
		h.admitted(d)
	}
}

// atLeast grows the reservation to n bytes if it holds less: what a call already holds for its input counts
// towards its work. Only the call that owns the reservation changes it.
func (r *reservation) atLeast(n int64) *Error {
	if n <= r.n {
		return nil
	}
	return r.resize(n)
}
