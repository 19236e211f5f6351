// Package attestation is what a sandbox's PID 1 states about itself once its gate passed, and how the
// controller reads it back.
//
// PID 1 writes one line to its own stderr — the container's log — after it proved the runtime's isolation and
// saw its network gate's target blocked, and before it serves any command: its session key (package
// pid1link), the isolation it proved and by what evidence, the kernel and marker it saw, and the exact target
// its gate probed. No command can exist before that line, and none can write to PID 1's log afterwards (PID 1
// is undumpable and hands its own stdout and stderr to no child), so the first such line of the log is PID 1's
// own. The controller reads it over
// pods/log, checks the gate's target against the address known to listen, and records the key in the
// Sandbox's status; the gateway then talks only to the holder of that key.
package attestation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the statement's "v".
const Version = 1

// Prefix starts the line; nothing else PID 1 logs starts with it.
const Prefix = "airlock-init: attestation "

// Statement is what PID 1 attests.
type Statement struct {
	V int `json:"v"`
	// Key is PID 1's session key (pid1link.Identity.PublicKey).
	Key string `json:"key"`
	// Isolation is what PID 1 proved of its runtime: gvisor, vm or none (its --expect-isolation), or
	// unverified when it was to prove gvisor and found nothing that does (Unverified says what it looked for).
	Isolation string `json:"isolation"`
	// Method is the evidence that proved Isolation: marker (gVisor's marker file), kernel-log (gVisor's boot
	// lines in the kernel log) or kernel (a kernel no node runs); empty for none and unverified.
	Method string `json:"method,omitempty"`
	// Unverified says what PID 1 looked for and did not find, when Isolation is unverified.
	Unverified string `json:"unverified,omitempty"`
	// Kernel is the kernel release PID 1 saw; GVisorMarker, whether gVisor's marker file was there.
	Kernel       string `json:"kernel"`
	GVisorMarker bool   `json:"gvisor_marker"`
	// GateTarget is the host:port PID 1's network gate dialled and saw blocked, Gate how (refused, timeout or
	// prohibited).
	GateTarget string `json:"gate_target"`
	Gate       string `json:"gate"`
	// ProxyTarget is the egress proxy PID 1 reached after the gate, if it had to.
	ProxyTarget string `json:"proxy_target,omitempty"`
}

// Line renders s as PID 1 logs it.
func Line(s Statement) ([]byte, error) {
	s.V = Version
	js, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode attestation: %w", err)
	}
	return append(append([]byte(Prefix), js...), '\n'), nil
}

// ErrMissing is a log without an attestation line (yet: the kubelet may not have written it out).
var ErrMissing = errors.New("PID 1 has not attested (no attestation line in its log)")

// maxLine bounds the line the scanner accepts; an attestation is a few hundred bytes.
const maxLine = 64 << 10

// Find returns the statement on the first attestation line of log. A later line never counts: PID 1 writes
// its statement once, before any command exists.
func Find(log []byte) (*Statement, error) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() {
		js, ok := bytes.CutPrefix(sc.Bytes(), []byte(Prefix))
		if !ok {
			continue
		}
		var s Statement
		if err := json.Unmarshal(js, &s); err != nil {
			return nil, fmt.Errorf("PID 1's attestation is not valid JSON: %w", err)
		}
		if s.V != Version {
			return nil, fmt.Errorf("PID 1's attestation is version %d, this manager reads %d", s.V, Version)
		}
		if s.Key == "" || s.GateTarget == "" || s.Isolation == "" {
			return nil, fmt.Errorf("PID 1's attestation lacks its key, gate target or isolation: %s", js)
		}
		return &s, nil
	}
	return nil, ErrMissing
}
