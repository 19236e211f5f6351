package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/gateway/admin"
)

func TestIntegrationLegacyCreateShape(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	// Exactly what existing clients send; they read only "id".
	code, body := g.do(t, key, "POST", "/v1/sandboxes", `{"size": "small", "timeout_minutes": 30}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	id, _ := body["id"].(string)
	if !strings.HasPrefix(id, "sbx-") {
		t.Fatalf("id %q", id)
	}
	var sb airlockv1.Sandbox
	if err := g.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: id}, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Spec.Size != airlockv1.SizeSmall || sb.Spec.Timeout.Duration != 30*time.Minute || sb.Spec.TemplateRef.Name != "python-node" {
		t.Fatalf("spec %+v", sb.Spec)
	}
	// No controller runs here, so after the bounded wait the answer is still pending.
	if body["status"] != "pending" {
		t.Fatalf("status %v", body["status"])
	}
}

func TestIntegrationCRUD(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	code, body := g.do(t, key, "POST", "/v1/sandboxes", map[string]any{"template": "python-node", "size": "medium",
		"network": "restricted", "env": map[string]string{"A": "1"}, "metadata": map[string]string{"run": "r1"}, "wait": false})
	if code != http.StatusCreated || body["status"] != "pending" || body["network"] != "restricted" {
		t.Fatalf("create: %d %v", code, body)
	}
	id, _ := body["id"].(string)
	if id == "" {
		t.Fatalf("create: no id in %v", body)
	}
	if md, _ := body["metadata"].(map[string]any); md["run"] != "r1" {
		t.Fatalf("metadata %v", body["metadata"])
	}
	code, body = g.do(t, key, "GET", "/v1/sandboxes", nil)
	if list, _ := body["sandboxes"].([]any); code != 200 || len(list) != 1 || idOf(list[0]) != id {
		t.Fatalf("list: %d %v", code, body)
	}
	g.markReady(t, ns, id)
	code, body = g.do(t, key, "GET", "/v1/sandboxes/"+id, nil)
	if code != 200 || body["status"] != "ready" || body["started_at"] == nil {
		t.Fatalf("get: %d %v", code, body)
	}
	// Extend: up is fine, down is 409, over the cap (2h here) is 400 naming the field.
	if code, body = g.do(t, key, "POST", "/v1/sandboxes/"+id+"/timeout", `{"timeout_minutes": 60}`); code != 200 {
		t.Fatalf("extend: %d %v", code, body)
	}
	if code, body = g.do(t, key, "POST", "/v1/sandboxes/"+id+"/timeout", `{"timeout_minutes": 45}`); code != http.StatusConflict {
		t.Fatalf("lower: %d %v", code, body)
	}
	if code, body = g.do(t, key, "POST", "/v1/sandboxes/"+id+"/timeout", `{"timeout_minutes": 180}`); code != 400 || errField(body) != "timeout_minutes" {
		t.Fatalf("over cap: %d %v", code, body)
	}
	// Unknown template: 400 naming the field, nothing created.
	if code, body = g.do(t, key, "POST", "/v1/sandboxes", `{"template": "nope"}`); code != 400 || errField(body) != "template" {
		t.Fatalf("unknown template: %d %v", code, body)
	}
	if code, body = g.do(t, key, "DELETE", "/v1/sandboxes/"+id, nil); code != 200 || body["status"] != "terminating" {
		t.Fatalf("delete: %d %v", code, body)
	}
	// Gone (no finalizer without the controller): a repeat is 404, never an error status of another kind.
	if code, _ = g.do(t, key, "DELETE", "/v1/sandboxes/"+id, nil); code != 404 {
		t.Fatalf("second delete: %d", code)
	}
	// Audit events regarding the sandbox.
	waitFor(t, 10*time.Second, func() bool {
		var evs eventsv1.EventList
		_ = g.c.List(context.Background(), &evs, client.InNamespace(ns))
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Name == id {
				reasons[e.Reason] = true
			}
		}
		return reasons[reasonCreated] && reasons[reasonDeleted]
	})
}

func errField(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	f, _ := e["field"].(string)
	return f
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestIntegrationTenantIsolation(t *testing.T) {
	g := newGateway(t, nil)
	nsA, keyA := g.tenant(t, 20)
	_, keyB := g.tenant(t, 20)
	id := g.readySandbox(t, nsA, t.TempDir())
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + id, ""},
		{"DELETE", "/v1/sandboxes/" + id, ""},
		{"POST", "/v1/sandboxes/" + id + "/timeout", `{"timeout_minutes": 60}`},
		{"POST", "/v1/sandboxes/" + id + "/exec", `{"command": "true"}`},
		{"GET", "/v1/sandboxes/" + id + "/files?path=a", ""},
		{"PUT", "/v1/sandboxes/" + id + "/files?path=a", "x"},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		code, resp := g.do(t, keyB, c.method, c.path, body)
		if code != http.StatusNotFound || errCode(resp) != CodeNotFound {
			t.Errorf("tenant B %s %s: %d %v, want 404", c.method, c.path, code, resp)
		}
	}
	if _, body := g.do(t, keyB, "GET", "/v1/sandboxes", nil); !isEmptyList(body["sandboxes"]) {
		t.Errorf("tenant B lists A's sandboxes: %v", body)
	}
	if code, _ := g.do(t, keyA, "GET", "/v1/sandboxes/"+id, nil); code != 200 {
		t.Errorf("tenant A lost its sandbox: %d", code)
	}
}

func TestIntegrationAuth(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	if code, body := g.do(t, "", "GET", "/v1/sandboxes", nil); code != 401 || errCode(body) != CodeUnauthenticated {
		t.Fatalf("no key: %d %v", code, body)
	}
	if code, _ := g.do(t, key[:len(key)-2]+"zz", "GET", "/v1/sandboxes", nil); code != 401 {
		t.Fatalf("wrong key: %d", code)
	}
	if code, _ := g.do(t, "not-a-key", "GET", "/v1/sandboxes", nil); code != 401 {
		t.Fatalf("malformed key: %d", code)
	}
	// Revoke by marking, then by deleting: both stop the key once the watch delivers it.
	id, _ := parseKeyID(key)
	if err := admin.RevokeKey(context.Background(), g.c, g.keyNS, id, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { code, _ := g.do(t, key, "GET", "/v1/sandboxes", nil); return code == 401 })
	key2 := g.key(t, ns)
	id2, _ := parseKeyID(key2)
	if err := admin.RevokeKey(context.Background(), g.c, g.keyNS, id2, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { code, _ := g.do(t, key2, "GET", "/v1/sandboxes", nil); return code == 401 })
	keys, err := admin.ListKeys(context.Background(), g.c, g.keyNS)
	if err != nil || len(keys) != 1 || !keys[0].Revoked {
		t.Fatalf("list keys: %+v %v", keys, err)
	}
}

// 50 racing creates against a quota of 20: the API server's quota admission lets exactly 20 through, and
// the rest are 429 with a clear message.
func TestIntegrationQuota(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	var mu sync.Mutex
	codes := map[int]int{}
	var msg string
	errs := make(chan error, 50)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, err := g.try(key, "POST", "/v1/sandboxes", `{"wait": false}`)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			if code == 429 {
				msg = errMessage(body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if codes[201] != 20 || codes[429] != 30 {
		t.Fatalf("status counts %v, want 20 x 201 and 30 x 429", codes)
	}
	if !strings.Contains(msg, "sandbox limit") {
		t.Fatalf("429 message %q", msg)
	}
	var list airlockv1.SandboxList
	if err := g.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 20 {
		t.Fatalf("%d sandboxes exist, want 20 (%v)", len(list.Items), err)
	}
}

func TestIntegrationCreateRateLimit(t *testing.T) {
	g := newGateway(t, func(o *Options) { o.CreateRate, o.CreateBurst = 0.001, 2 })
	_, key := g.tenant(t, 20)
	for i := range 2 {
		if code, body := g.do(t, key, "POST", "/v1/sandboxes", `{"wait": false}`); code != 201 {
			t.Fatalf("create %d: %d %v", i, code, body)
		}
	}
	resp, _ := g.raw(t, key, "POST", "/v1/sandboxes", `{"wait": false}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third create: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func idOf(v any) string {
	m, _ := v.(map[string]any)
	id, _ := m["id"].(string)
	return id
}

// isEmptyList reports whether v is a JSON array with no elements (not missing, not another type).
func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}
