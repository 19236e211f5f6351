package gateway

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// due makes n candidates of tenant, named tenant-0..n-1, with deadlines a second apart.
func due(tenant string, n int, at time.Time) []renewCandidate {
	var out []renewCandidate
	for i := range n {
		sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: fmt.Sprintf("%s-%d", tenant, i)}}
		out = append(out, renewCandidate{sb: sb, deadline: at.Add(time.Duration(i) * time.Second)})
	}
	return out
}

func countByTenant(cs []renewCandidate) map[string]int {
	n := map[string]int{}
	for _, c := range cs {
		n[c.sb.Namespace]++
	}
	return n
}

// A tenant with many sandboxes due gets its share and no more; the others get theirs beside it.
func TestRenewerTakesEachTenantsShare(t *testing.T) {
	now := time.Now()
	r := newRenewer()
	got := countByTenant(r.take(append(append(due("hung", 50, now), due("a", 1, now)...), due("b", 2, now)...), now))
	if want := map[string]int{"hung": renewChecksPerTenant, "a": 1, "b": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("started %v, want %v", got, want)
	}
	// Running checks are not started again, and hold their tenant's share until done.
	if again := r.take(append(append(due("hung", 50, now), due("a", 1, now)...), due("b", 2, now)...), now); len(again) != 0 {
		t.Fatalf("started %d checks while every due sandbox's check runs or its tenant's share is full", len(again))
	}
}

// Over all tenants at most renewChecks run, taken one per tenant in turn.
func TestRenewerBoundsAllChecksAndServesTenantsInTurn(t *testing.T) {
	now := time.Now()
	var all []renewCandidate
	for i := range 5 {
		all = append(all, due(fmt.Sprintf("t%d", i), 10, now)...)
	}
	r := newRenewer()
	got := r.take(all, now)
	if len(got) != renewChecks {
		t.Fatalf("started %d checks, want %d", len(got), renewChecks)
	}
	for tenant, n := range countByTenant(got) {
		if n < renewChecks/5 || n > renewChecksPerTenant {
			t.Fatalf("tenant %s got %d of %d checks (5 tenants, at most %d each)", tenant, n, renewChecks, renewChecksPerTenant)
		}
	}
	for _, c := range got[:1] {
		r.done(c)
	}
	if more := r.take(all, now); len(more) != 1 {
		t.Fatalf("one check ended: started %d, want 1", len(more))
	}
}

// A tenant's sandboxes take turns: those not tried yet come before those tried (a hung sandbox is tried every
// interval and never renewed), then the nearest deadline first.
func TestRenewerTriesLeastRecentlyTriedFirst(t *testing.T) {
	now := time.Now()
	cands := due("a", renewChecksPerTenant+2, now)
	r := newRenewer()
	first := r.take(cands, now)
	for i, c := range first {
		if c.sb.Name != cands[i].sb.Name {
			t.Fatalf("first round took %s at %d, want nearest deadline first (%s)", c.sb.Name, i, cands[i].sb.Name)
		}
		r.done(c)
	}
	second := r.take(cands, now.Add(time.Second))
	for i, want := range []string{cands[renewChecksPerTenant].sb.Name, cands[renewChecksPerTenant+1].sb.Name, cands[0].sb.Name} {
		if second[i].sb.Name != want {
			t.Fatalf("second round took %s at %d, want %s (untried first, then the nearest deadline)", second[i].sb.Name, i, want)
		}
	}
}
