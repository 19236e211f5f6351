package gateway

import (
	"strings"
	"testing"
	"time"
)

// GET /processes counts PID 1's list in the tenant's memory budget before reading it, from the length the
// reply's header gives: a list of megabytes is refused with 429 while the tenant's other calls hold the rest of
// its share, and answered once they are done. Fails without the count (the list was read whatever the budget
// held): checked.
func TestIntegrationProcessListIsCountedBeforeItIsRead(t *testing.T) {
	const share = 4 << 20
	g := newGateway(t, func(o *Options) { o.MaxInflightBytes, o.MaxInflightBytesPerTenant = 64<<20, share })
	ns, key := g.tenant(t, 20)
	id := g.readySandbox(t, ns, t.TempDir())
	// PID 1 keeps the runs it knows with their command, cut at 4 KiB: made of control bytes, each one is 24 KiB
	// of JSON in the list, and 100 of them make a list of about 2.4 MiB.
	script := "true " + strings.Repeat("\x01", 4<<10)
	for range 100 {
		if status, res := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": script}); status != 200 {
			t.Fatalf("exec: %d %v", status, res)
		}
	}
	list := func() (int, map[string]any) { return g.do(t, key, "GET", "/v1/sandboxes/"+id+"/processes", nil) }
	if status, res := list(); status != 200 {
		t.Fatalf("the list alone: %d %v", status, res)
	}

	// Another call of the tenant's holds part of its share while the list is asked for.
	held := make(chan error, 1)
	go func() {
		status, res, err := g.try(key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "sleep 3"})
		if err == nil && status != 200 {
			t.Errorf("the call holding memory: %d %v", status, res)
		}
		held <- err
	}()
	waitFor(t, 5*time.Second, func() bool { return g.srv.memory.heldBy(ns) > 0 })
	status, res := list()
	if e, _ := res["error"].(map[string]any); status != 429 || e["code"] != CodeOutputBudget {
		t.Fatalf("the list while the tenant holds %d bytes of its %d: %d %v, want 429 %s", g.srv.memory.heldBy(ns), share, status, res, CodeOutputBudget)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if status, res := list(); status != 200 {
		t.Fatalf("the list once the other call ended: %d %v", status, res)
	}
	if n := g.srv.memory.heldBy(ns); n != 0 {
		t.Fatalf("%d bytes still held after every call ended", n)
	}
}

// heldBy is what tenant's calls hold now.
func (b *byteBudget) heldBy(tenant string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byTenant[tenant]
}
