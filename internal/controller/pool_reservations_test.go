package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReservationsKeepClaimsApart(t *testing.T) {
	pods := []*corev1.Pod{}
	for _, uid := range []types.UID{"a", "b"} {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}})
	}
	var r reservations
	now := time.Now()
	first, mine := r.pick(pods, map[types.UID]bool{}, now)
	if first == nil || !mine {
		t.Fatalf("first pick: %v, mine %v", first, mine)
	}
	second, mine := r.pick(pods, map[types.UID]bool{}, now)
	if second == nil || !mine || second.UID == first.UID {
		t.Fatalf("a second claim got %v (mine %v) while the first holds %s", second, mine, first.UID)
	}
	// Both held: a third claim still gets one to try under the lock, but not as its own.
	third, mine := r.pick(pods, map[types.UID]bool{}, now)
	if third == nil || mine {
		t.Fatalf("with every member held, pick gave %v, mine %v", third, mine)
	}
	if got, _ := r.pick(pods, map[types.UID]bool{"a": true, "b": true}, now); got != nil {
		t.Fatalf("pick returned %s, already tried", got.UID)
	}
	r.release(first.UID)
	if got, mine := r.pick(pods, map[types.UID]bool{}, now); got == nil || got.UID != first.UID || !mine {
		t.Fatalf("after release, pick gave %v (mine %v), want %s", got, mine, first.UID)
	}
	// A reservation whose holder never released it ends after reserveFor.
	if got, mine := r.pick(pods, map[types.UID]bool{first.UID: true}, now.Add(reserveFor)); got == nil || got.UID != second.UID || !mine {
		t.Fatalf("after reserveFor, pick gave %v (mine %v), want %s", got, mine, second.UID)
	}
}
