package gateway

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Over a node's capacity, commands wait for a slot, and tenants are served in turn: a tenant with one command
// waiting goes before the rest of another tenant's flood.
func TestNodeSlotsServeTenantsInTurn(t *testing.T) {
	s := newNodeSlots(2, nil)
	ctx := context.Background()
	var held []func()
	for range 2 {
		rel, waited, err := s.acquire(ctx, "n1", "flood")
		if err != nil || waited != 0 {
			t.Fatalf("a free slot: %v %v", waited, err)
		}
		held = append(held, rel)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(tenant string) {
		wg.Go(func() {
			rel, waited, err := s.acquire(ctx, "n1", tenant)
			if err != nil || waited <= 0 {
				t.Errorf("%s: waited %v, %v", tenant, waited, err)
				return
			}
			mu.Lock()
			order = append(order, tenant)
			mu.Unlock()
			rel()
		})
		time.Sleep(20 * time.Millisecond) // arrival order
	}
	for range 3 {
		enqueue("flood")
	}
	enqueue("other")
	// Another node is not affected.
	if rel, waited, err := s.acquire(ctx, "n2", "other"); err != nil || waited != 0 {
		t.Fatalf("another node: %v %v", waited, err)
	} else {
		rel()
	}
	held[0]() // one slot: flood's first waiter, then (as each releases) other, then flood's rest
	wg.Wait()
	held[1]()
	if len(order) != 4 || order[0] != "flood" || order[1] != "other" {
		t.Fatalf("served in order %v, want flood then other", order)
	}
	if len(s.nodes) != 0 {
		t.Fatalf("nodes left: %v", s.nodes)
	}
}

// A caller that gives up leaves the queue; a slot granted just as it gave up goes on to the next.
func TestNodeSlotsCancel(t *testing.T) {
	s := newNodeSlots(1, nil)
	rel, _, _ := s.acquire(context.Background(), "n1", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := s.acquire(ctx, "n1", "b"); err == nil {
		t.Fatal("acquired past a full node")
	}
	next := make(chan error, 1)
	go func() {
		r, _, err := s.acquire(context.Background(), "n1", "c")
		if err == nil {
			r()
		}
		next <- err
	}()
	time.Sleep(20 * time.Millisecond)
	rel()
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if len(s.nodes) != 0 {
		t.Fatalf("nodes left: %v", s.nodes)
	}
}
