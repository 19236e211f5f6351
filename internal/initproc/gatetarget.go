package initproc

import (
	"errors"
	"fmt"
	"net"
)

// localGateTargets is set only by PID1ForTests: outside a pod there is no policy to wait for.
var localGateTargets bool

// CheckGateHost refuses a network gate target that cannot prove the sandbox's policy is in effect. The gate
// passes when a connection to a listening port outside the pod is blocked; a dial to the pod's own loopback
// (a loopback or unspecified address, or a name, which the pod's /etc/hosts may map to loopback) is refused by
// the pod itself whatever the policy says, and an empty target probes nothing at all. The manager checks its
// --gate-target with it too.
func CheckGateHost(host string) error {
	if host == "" {
		return errors.New("no network gate target: --gate-host is empty (the node's IP did not reach PID 1), " +
			"so the sandbox's network isolation cannot be proven; no command may run without it")
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return fmt.Errorf("network gate target %q is not an IP address: the sandbox has no DNS, and a name may "+
			"resolve to the pod's own loopback, whose refusal proves nothing", host)
	case ip.IsUnspecified():
		return fmt.Errorf("network gate target %s is the unspecified address: a connection to it stays in the pod "+
			"(its loopback), where no network policy applies, so its refusal proves nothing", host)
	case ip.IsLoopback():
		return fmt.Errorf("network gate target %s is a loopback address: a refusal there comes from the pod itself "+
			"and proves nothing about its network policy", host)
	}
	return nil
}

// checkTarget is CheckGateHost for this gate, but for tests outside a pod (PID1ForTests): there an empty host
// skips the network gate and a loopback target stands in for the node.
func (g *gateConfig) checkTarget() error {
	if g.localTargets {
		return nil
	}
	return CheckGateHost(g.host)
}
