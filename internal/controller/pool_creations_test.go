package controller

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A created member counts until the cache shows it or it is too old to be on its way.
func TestCreationsCountUntilCached(t *testing.T) {
	var c creations
	pool, other := client.ObjectKey{Namespace: "ns", Name: "p"}, client.ObjectKey{Namespace: "ns", Name: "q"}
	t0 := time.Unix(1000, 0)
	c.add(pool, "p-a", t0)
	c.add(pool, "p-b", t0)
	c.add(other, "q-a", t0)
	cached := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p-a"}}}
	if got := c.unseen(pool, cached, t0.Add(time.Second)); !slices.Equal(got, []string{"p-b"}) {
		t.Fatalf("unseen %v, want [p-b]", got)
	}
	if got := c.unseen(pool, nil, t0.Add(time.Second)); !slices.Equal(got, []string{"p-b"}) {
		t.Fatalf("p-a, once seen, is forgotten: %v", got)
	}
	if got := c.unseen(pool, nil, t0.Add(orphanPolicyAge)); len(got) != 0 {
		t.Fatalf("too old to count: %v", got)
	}
	if got := c.unseen(other, nil, t0); !slices.Equal(got, []string{"q-a"}) {
		t.Fatalf("pools are apart: %v", got)
	}
}

// The gate port does not depend on the order the cache lists nodes in: the commonest, the lowest of a tie.
func TestCommonestPort(t *testing.T) {
	for _, tc := range []struct {
		ports map[int32]int
		want  int32
	}{
		{map[int32]int{10250: 1}, 10250},
		{map[int32]int{10255: 1, 10250: 1}, 10250},
		{map[int32]int{10255: 3, 10250: 1}, 10255},
		{map[int32]int{10255: 2, 10250: 2, 9000: 1}, 10250},
	} {
		for range 20 { // map order varies between iterations
			if got := commonestPort(tc.ports); got != tc.want {
				t.Fatalf("%v: %d, want %d", tc.ports, got, tc.want)
			}
		}
	}
}
