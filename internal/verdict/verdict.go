// Package verdict is the one-line report that airlock-init setup leaves in its termination message when it
// succeeds, and its parser for the controller. It has no dependencies: airlock-init is a small static binary.
package verdict

import (
	"fmt"
	"strings"
	"time"
)

// prefix versions the format; the controller refuses anything else rather than guessing.
const prefix = "airlock-verdict/1"

// Gate says how the network gate saw its target blocked. Each is something a policy does to a port that is
// known to listen; "nothing listens" and "no route" are not among them.
type Gate string

const (
	// GateRefused is a reject: a RST or ICMP port-unreachable (ECONNREFUSED).
	GateRefused Gate = "refused"
	// GateTimeout is a drop: the connection attempt got no answer within the dial timeout.
	GateTimeout Gate = "timeout"
	// GateProhibited is an ICMP host- or admin-prohibited reject (EHOSTUNREACH).
	GateProhibited Gate = "prohibited"
)

// Verdict is what the init container saw from inside the pod, under the pod's runtime.
type Verdict struct {
	// Kernel is the kernel release (uname -r).
	Kernel string
	// GVisorMarker is true when /proc/gvisor/kernel_is_gvisor was present.
	GVisorMarker bool
	// Gate is how the gate target was found blocked.
	Gate Gate
	// Target is the host:port the gate probed.
	Target string
	// Took is how long the gate waited for the block.
	Took time.Duration
	// Proxy, when set, is the egress proxy (host:port) the gate reached after its target was blocked: the
	// positive control of a Restricted sandbox with an allowlist. Optional.
	Proxy string
}

// String formats v as one line, e.g.
// "airlock-verdict/1 kernel=4.4.0 gvisor-marker=yes gate=refused target=10.123.0.1:10250 took=12ms".
func (v Verdict) String() string {
	marker := "no"
	if v.GVisorMarker {
		marker = "yes"
	}
	s := fmt.Sprintf("%s kernel=%s gvisor-marker=%s gate=%s target=%s took=%s",
		prefix, v.Kernel, marker, v.Gate, v.Target, v.Took.Round(time.Millisecond))
	if v.Proxy != "" {
		s += " proxy=" + v.Proxy
	}
	return s
}

// Parse reads a verdict written by String. Every field is required and known, but proxy, which is optional.
func Parse(s string) (Verdict, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || fields[0] != prefix {
		return Verdict{}, fmt.Errorf("not an %s verdict: %q", prefix, s)
	}
	kv := map[string]string{}
	for _, f := range fields[1:] {
		k, val, ok := strings.Cut(f, "=")
		if !ok || val == "" {
			return Verdict{}, fmt.Errorf("verdict field %q is not key=value", f)
		}
		if _, dup := kv[k]; dup {
			return Verdict{}, fmt.Errorf("verdict field %q repeated", k)
		}
		kv[k] = val
	}
	for _, k := range []string{"kernel", "gvisor-marker", "gate", "target", "took"} {
		if _, ok := kv[k]; !ok {
			return Verdict{}, fmt.Errorf("verdict has no %s", k)
		}
	}
	want := 5
	if _, ok := kv["proxy"]; ok {
		want = 6
	}
	if len(kv) != want {
		return Verdict{}, fmt.Errorf("verdict has unknown fields: %q", s)
	}
	v := Verdict{Kernel: kv["kernel"], Gate: Gate(kv["gate"]), Target: kv["target"], Proxy: kv["proxy"]}
	switch kv["gvisor-marker"] {
	case "yes":
		v.GVisorMarker = true
	case "no":
	default:
		return Verdict{}, fmt.Errorf("verdict gvisor-marker %q is neither yes nor no", kv["gvisor-marker"])
	}
	switch v.Gate {
	case GateRefused, GateTimeout, GateProhibited:
	default:
		return Verdict{}, fmt.Errorf("verdict gate %q is not refused, timeout or prohibited", v.Gate)
	}
	took, err := time.ParseDuration(kv["took"])
	if err != nil {
		return Verdict{}, fmt.Errorf("verdict took: %w", err)
	}
	v.Took = took
	return v, nil
}
