package gateway

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestShare(t *testing.T) {
	for _, c := range []struct{ limit, replicas, want int }{
		{20, 1, 20}, {20, 2, 10}, {20, 3, 7}, {21, 2, 11}, {1, 3, 1}, {2, 5, 1},
		{20, 0, 20}, {20, -1, 20}, // no count yet: this replica alone
		{0, 2, 0}, {-1, 3, -1}, // no limit stays no limit
	} {
		if got := share(c.limit, c.replicas); got != c.want {
			t.Errorf("share(%d, %d) = %d, want %d", c.limit, c.replicas, got, c.want)
		}
		// The replicas together admit at least the limit and at most limit+replicas-1.
		if n := max(c.replicas, 1); c.limit > 0 && (n*share(c.limit, n) < c.limit || n*share(c.limit, n) > c.limit+n-1) {
			t.Errorf("share(%d, %d): %d replicas admit %d", c.limit, n, n, n*share(c.limit, n))
		}
	}
}

// acquireN takes n slots for tenant concurrently and returns the releases of those granted.
func acquireN(s *execSlots, tenant string, n int) (granted []func(), refused []*Error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			rel, e := s.acquire(tenant)
			mu.Lock()
			defer mu.Unlock()
			if e != nil {
				refused = append(refused, e)
			} else {
				granted = append(granted, rel)
			}
		})
	}
	wg.Wait()
	return granted, refused
}

func TestExecSlotsPerTenant(t *testing.T) {
	s := newExecSlots(20, -1, nil)
	granted, refused := acquireN(s, "t1", 50)
	if len(granted) != 20 {
		t.Fatalf("granted %d of 50, want exactly 20", len(granted))
	}
	if e := refused[0]; e.Status != 429 || e.Code != CodeTooManyExecs || e.RetryAfter <= 0 {
		t.Fatalf("refusal %+v, want 429 %s with Retry-After", e, CodeTooManyExecs)
	}
	if _, e := s.acquire("t2"); e != nil {
		t.Fatal("another tenant must not share the limit")
	}
	granted[0]()
	granted[0]() // double release is harmless
	if _, e := s.acquire("t1"); e != nil {
		t.Fatal("a released slot must be reusable")
	}
	if _, e := s.acquire("t1"); e == nil {
		t.Fatal("double release freed two slots")
	}
}

func TestExecSlotsGatewayWide(t *testing.T) {
	s := newExecSlots(3, 5, nil)
	a, _ := acquireN(s, "a", 3)
	b, _ := acquireN(s, "b", 3)
	if len(a)+len(b) != 5 {
		t.Fatalf("granted %d+%d, want 5 in all", len(a), len(b))
	}
	_, e := s.acquire("c")
	if e == nil || e.Status != 429 || e.Code != CodeTooManyStreams || e.RetryAfter <= 0 {
		t.Fatalf("a sixth stream: %+v, want 429 %s with Retry-After", e, CodeTooManyStreams)
	}
	a[0]()
	if _, e := s.acquire("c"); e != nil {
		t.Fatalf("a released stream must admit another tenant: %v", e)
	}
}

// Each replica admits its share of both limits, following the replica count as it changes.
func TestExecSlotsShareFollowsReplicas(t *testing.T) {
	replicas := 2
	s := newExecSlots(5, 8, func() int { return replicas })
	if g, _ := acquireN(s, "a", 5); len(g) != 3 { // ceil(5/2)
		t.Fatalf("2 replicas: granted %d, want 3", len(g))
	}
	replicas = 1
	if g, _ := acquireN(s, "a", 5); len(g) != 2 { // now 5 in all
		t.Fatalf("1 replica: granted %d more, want 2", len(g))
	}
	replicas = 4 // this replica's share of 8 streams is 2, and it holds 5
	if _, e := s.acquire("b"); e == nil || e.Code != CodeTooManyStreams {
		t.Fatalf("4 replicas: %v, want %s", e, CodeTooManyStreams)
	}
}

func TestReadyEndpoints(t *testing.T) {
	yes, no := true, false
	pod := func(name string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: "airlock-system", Name: name, UID: types.UID("uid-" + name)}
	}
	v4 := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.1"}, TargetRef: pod("a"), Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		{Addresses: []string{"10.0.0.2"}, TargetRef: pod("b")}, // unknown means ready
		{Addresses: []string{"10.0.0.3"}, TargetRef: pod("c"), Conditions: discoveryv1.EndpointConditions{Ready: &no}},
		{Addresses: []string{"10.0.0.4"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}, // no target
	}}
	// Dual stack: the same pods again, by their IPv6 addresses.
	v6 := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"fd00::1"}, TargetRef: pod("a"), Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		{Addresses: []string{"fd00::2"}, TargetRef: pod("b"), Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
	}}
	if n := readyEndpoints([]*discoveryv1.EndpointSlice{v4, v6}); n != 3 {
		t.Fatalf("ready endpoints %d, want 3 (a, b, 10.0.0.4)", n)
	}
	if n := readyEndpoints(nil); n != 0 {
		t.Fatalf("no slices: %d", n)
	}
}
