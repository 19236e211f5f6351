package sandbox

import "path"

// GVisorHandlers are the RuntimeClass handlers (globs, as path.Match) that run gVisor: runsc, its variants
// named runsc-<platform> in containerd's config, and GKE Sandbox's "gvisor". Every setting that depends on the
// runtime follows the handler, which is what the node runs, never the RuntimeClass's name: a class named
// "sandboxed" with handler runsc is gVisor, and GKE's class gvisor has handler gvisor.
var GVisorHandlers = []string{"runsc", "runsc-*", "gvisor"}

// GVisorHandler reports whether a RuntimeClass handler runs gVisor: its pod must then prove gVisor from inside,
// and its working directory lives in runsc's sized root overlay.
func GVisorHandler(handler string) bool { return matchesHandler(GVisorHandlers, handler) }

// matchesHandler reports whether a RuntimeClass handler matches one of the globs. A malformed glob matches
// nothing (ValidateHandlerGlobs refuses one at the manager's start).
func matchesHandler(globs []string, handler string) bool {
	for _, g := range globs {
		if ok, err := path.Match(g, handler); err == nil && ok {
			return true
		}
	}
	return false
}
