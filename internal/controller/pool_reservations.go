package controller

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// reserveFor bounds how long a member taken by this process stays reserved: long enough for the cache to show
// the claim (a claimed member is no longer a candidate), short enough that a reservation whose holder died
// cannot hide a member for long.
const reserveFor = 10 * time.Second

// reservations keeps the racing claims of this process off each other's members. Every claimer reads the same
// cache, and without them a burst of N claims on N members picks at random and collides often (at 20 and 20,
// most claims lose at least one member to a conflict, each costing two more API calls). The member's
// optimistic lock still decides every claim, so that claims from another process (a new leader) stay safe.
type reservations struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
}

// pick returns the first candidate not yet tried that no other claim of this process holds, reserving it
// (mine); when every untried candidate is held, the first of them (not mine): its holder may still lose it,
// and the lock tells.
func (r *reservations) pick(candidates []*corev1.Pod, tried map[types.UID]bool, now time.Time) (pod *corev1.Pod, mine bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.UID]time.Time{}
	}
	for uid, at := range r.m {
		if now.Sub(at) >= reserveFor {
			delete(r.m, uid)
		}
	}
	var held *corev1.Pod
	for _, c := range candidates {
		if tried[c.UID] {
			continue
		}
		if _, ok := r.m[c.UID]; ok {
			if held == nil {
				held = c
			}
			continue
		}
		r.m[c.UID] = now
		return c, true
	}
	return held, false
}

// release gives up a member this process reserved and did not get.
func (r *reservations) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, uid)
}
