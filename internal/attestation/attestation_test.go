package attestation

import (
	"errors"
	"strings"
	"testing"
)

func TestLineAndFind(t *testing.T) {
	st := Statement{Key: "ed25519:AAAA", Isolation: "gvisor", Method: "kernel-log", Kernel: "4.4.0", GateTarget: "10.0.0.1:10250", Gate: "refused"}
	line, err := Line(st)
	if err != nil {
		t.Fatal(err)
	}
	log := "airlock-init: kernel 4.4.0, isolation gvisor (kernel-log); network isolation in effect after 1ms\n" + string(line) +
		"airlock-init pid1: keeper: \"x\"\n"
	got, err := Find([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	st.V = Version
	if *got != st {
		t.Fatalf("got %+v, want %+v", got, st)
	}
}

// What a manager of the previous release wrote and read (no method) still reads, and an unverified statement
// keeps its reason.
func TestFindReadsOptionalFields(t *testing.T) {
	old := Prefix + `{"v":1,"key":"k","isolation":"gvisor","kernel":"4.4.0","gvisor_marker":true,"gate_target":"a:1","gate":"refused"}` + "\n"
	got, err := Find([]byte(old))
	if err != nil || got.Method != "" || !got.GVisorMarker {
		t.Fatalf("an older PID 1's statement: %+v, %v", got, err)
	}
	line, _ := Line(Statement{Key: "k", Isolation: "unverified", Unverified: "no marker", GateTarget: "a:1"})
	if got, err := Find(line); err != nil || got.Unverified != "no marker" || got.Isolation != "unverified" {
		t.Fatalf("an unverified statement: %+v, %v", got, err)
	}
}

// Only the first attestation line counts: one written later (by anyone) changes nothing.
func TestFindTakesTheFirstLine(t *testing.T) {
	first, _ := Line(Statement{Key: "ed25519:FIRST", Isolation: "gvisor", GateTarget: "10.0.0.1:10250", Gate: "refused"})
	later, _ := Line(Statement{Key: "ed25519:LATER", Isolation: "gvisor", GateTarget: "127.0.0.1:1", Gate: "refused"})
	got, err := Find(append(first, later...))
	if err != nil || got.Key != "ed25519:FIRST" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestFindRefusals(t *testing.T) {
	for name, log := range map[string]string{
		"none":          "airlock-init: kernel 4.4.0\n",
		"mid-line":      "x " + Prefix + `{"v":1,"key":"k","isolation":"none","gate_target":"a:1"}` + "\n",
		"not json":      Prefix + "{\n",
		"other version": Prefix + `{"v":2,"key":"k","isolation":"none","gate_target":"a:1"}` + "\n",
		"no key":        Prefix + `{"v":1,"isolation":"none","gate_target":"a:1"}` + "\n",
		"no target":     Prefix + `{"v":1,"key":"k","isolation":"none"}` + "\n",
	} {
		_, err := Find([]byte(log))
		if err == nil {
			t.Errorf("%s: accepted %q", name, log)
		}
		if name == "none" || name == "mid-line" {
			if !errors.Is(err, ErrMissing) {
				t.Errorf("%s: %v, want ErrMissing", name, err)
			}
		}
	}
	if _, err := Find([]byte(strings.Repeat("x", 2*maxLine))); !errors.Is(err, ErrMissing) {
		t.Errorf("an overlong line: %v", err)
	}
}
