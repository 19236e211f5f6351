package controller

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// creations remembers the members a pool reconciler created until its cache shows them (as a ReplicaSet's
// expectations do): the pod's add event that triggers the next pass may come before its siblings' are cached,
// and counting only what is cached would make them again. An entry older than orphanPolicyAge is forgotten.
type creations struct {
	mu sync.Mutex
	m  map[client.ObjectKey]map[string]time.Time
}

func (c *creations) add(pool client.ObjectKey, name string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[client.ObjectKey]map[string]time.Time{}
	}
	if c.m[pool] == nil {
		c.m[pool] = map[string]time.Time{}
	}
	c.m[pool][name] = at
}

// unseen forgets the pool's created members that pods (the cache's) show, or that are too old, and returns the
// others.
func (c *creations) unseen(pool client.ObjectKey, pods []corev1.Pod, now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := c.m[pool]
	if len(pending) == 0 {
		return nil
	}
	for i := range pods {
		delete(pending, pods[i].Name)
	}
	var names []string
	for name, at := range pending {
		if now.Sub(at) >= orphanPolicyAge {
			delete(pending, name)
			continue
		}
		names = append(names, name)
	}
	if len(pending) == 0 {
		delete(c.m, pool)
	}
	return names
}
