package verdict

import (
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	for _, v := range []Verdict{
		{Kernel: "4.4.0", GVisorMarker: true, Gate: GateRefused, Target: "10.123.0.1:10250", Took: 12 * time.Millisecond},
		{Kernel: "6.1.0-18-amd64", Gate: GateTimeout, Target: "[fd00::1]:10250", Took: 0},
		{Kernel: "5.10.0", Gate: GateProhibited, Target: "10.0.0.5:10250", Took: 3 * time.Second},
		{Kernel: "4.4.0", GVisorMarker: true, Gate: GateRefused, Target: "10.123.0.1:10250", Took: time.Millisecond, Proxy: "10.96.7.7:3128"},
	} {
		got, err := Parse(v.String())
		if err != nil {
			t.Fatalf("%q: %v", v.String(), err)
		}
		if got != v {
			t.Errorf("round trip of %q: got %+v, want %+v", v.String(), got, v)
		}
	}
}

func TestParseRejects(t *testing.T) {
	ok := "airlock-verdict/1 kernel=4.4.0 gvisor-marker=yes gate=refused target=10.123.0.1:10250 took=12ms"
	if _, err := Parse(ok); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	for name, s := range map[string]string{
		"empty (an older init wrote nothing)": "",
		"free text":                           "gate said so",
		"other version":                       strings.Replace(ok, "/1", "/2", 1),
		"missing target":                      strings.Replace(ok, " target=10.123.0.1:10250", "", 1),
		"unknown gate result":                 strings.Replace(ok, "gate=refused", "gate=unreachable", 1),
		"marker not yes/no":                   strings.Replace(ok, "gvisor-marker=yes", "gvisor-marker=maybe", 1),
		"unknown field":                       ok + " extra=1",
		"repeated field":                      ok + " kernel=6.1.0",
		"proxy and an unknown field":          ok + " proxy=10.96.7.7:3128 extra=1",
		"empty proxy":                         ok + " proxy=",
		"bad duration":                        strings.Replace(ok, "took=12ms", "took=soon", 1),
		"empty value":                         strings.Replace(ok, "kernel=4.4.0", "kernel=", 1),
	} {
		if v, err := Parse(s); err == nil {
			t.Errorf("%s: %q parsed as %+v, want an error", name, s, v)
		}
	}
}
