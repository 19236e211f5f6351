package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A copy older than our last write is stale until one as new arrives; an unparsable version is never stale.
func TestWrittenVersions(t *testing.T) {
	var w writtenVersions
	k := types.NamespacedName{Namespace: "ns", Name: "s"}
	check := func(rv string, want bool) {
		t.Helper()
		if got := w.stale(k, rv); got != want {
			t.Fatalf("stale(%q) = %v, want %v", rv, got, want)
		}
	}
	check("5", false) // nothing written yet
	w.record(k, "10")
	w.record(k, "8") // an older write's answer arriving late does not lower the mark
	check("9", true)
	check("9", true)
	check("10", false) // caught up: the wait ends
	check("9", false)
	w.record(k, "12")
	check("abc", false)
	check("11", false) // the unparsable copy ended the wait
	w.record(k, "14")
	w.forget(k)
	check("13", false)
}
