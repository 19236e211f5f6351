package gateway

import (
	"context"
	"sync"
	"time"
)

// nodeSlots admits command work by node capacity: at most perNode commands (this replica's share) run at once
// on one node, so a flood of commands cannot take the CPU its sandboxes' own starts need. Commands over it wait,
// queued per tenant and served in turn across tenants (one tenant's flood does not delay another tenant's next
// command behind all of it), until a slot frees or the caller's context ends; the wait is reported. Work on
// nodes whose name is not known (a sandbox made before status.nodeName existed) is not queued.
type nodeSlots struct {
	perNode  int
	replicas func() int

	mu    sync.Mutex
	nodes map[string]*nodeQueue
}

// nodeQueue is one node's slots and waiters.
type nodeQueue struct {
	running int
	// waiting holds each tenant's waiters in arrival order; turn is the tenants with waiters, in the order
	// they are served next.
	waiting map[string][]chan struct{}
	turn    []string
}

func newNodeSlots(perNode int, replicas func() int) *nodeSlots {
	return &nodeSlots{perNode: perNode, replicas: replicas, nodes: map[string]*nodeQueue{}}
}

// acquire takes a slot on node for tenant, waiting its turn if the node is full. It returns the release (later
// calls are no-ops) and how long it waited; ctx's error if it ended first.
func (s *nodeSlots) acquire(ctx context.Context, node, tenant string) (release func(), waited time.Duration, err error) {
	if s == nil || s.perNode <= 0 || node == "" {
		return func() {}, 0, nil
	}
	n := 1
	if s.replicas != nil {
		n = max(s.replicas(), 1)
	}
	limit := share(s.perNode, n)
	start := time.Now()
	s.mu.Lock()
	q := s.nodes[node]
	if q == nil {
		q = &nodeQueue{waiting: map[string][]chan struct{}{}}
		s.nodes[node] = q
	}
	if q.running < limit && len(q.turn) == 0 {
		q.running++
		s.mu.Unlock()
		return s.releaser(node, limit), 0, nil
	}
	ch := make(chan struct{})
	if len(q.waiting[tenant]) == 0 {
		q.turn = append(q.turn, tenant)
	}
	q.waiting[tenant] = append(q.waiting[tenant], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return s.releaser(node, limit), time.Since(start), nil
	case <-ctx.Done():
		s.mu.Lock()
		granted := !s.remove(q, tenant, ch)
		s.mu.Unlock()
		if granted { // the slot came as we gave up: pass it on
			s.releaser(node, limit)()
		}
		return nil, time.Since(start), ctx.Err()
	}
}

// releaser frees one slot on node: the next tenant in turn gets it.
func (s *nodeSlots) releaser(node string, limit int) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			q := s.nodes[node]
			q.running--
			for q.running < limit && len(q.turn) > 0 {
				tenant := q.turn[0]
				ws := q.waiting[tenant]
				ch := ws[0]
				if len(ws) == 1 {
					delete(q.waiting, tenant)
					q.turn = q.turn[1:]
				} else {
					q.waiting[tenant] = ws[1:]
					q.turn = append(q.turn[1:], tenant) // the others' turn first
				}
				q.running++
				close(ch)
			}
			if q.running == 0 && len(q.turn) == 0 {
				delete(s.nodes, node)
			}
		})
	}
}

// remove takes ch out of tenant's queue; false if it was not there (already granted).
func (s *nodeSlots) remove(q *nodeQueue, tenant string, ch chan struct{}) bool {
	ws := q.waiting[tenant]
	for i, w := range ws {
		if w != ch {
			continue
		}
		ws = append(ws[:i:i], ws[i+1:]...)
		if len(ws) > 0 {
			q.waiting[tenant] = ws
			return true
		}
		delete(q.waiting, tenant)
		for j, t := range q.turn {
			if t == tenant {
				q.turn = append(q.turn[:j:j], q.turn[j+1:]...)
				break
			}
		}
		return true
	}
	return false
}
