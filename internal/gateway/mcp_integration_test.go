package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveWithTimeouts serves the gateway as cmd/gateway does, with short server timeouts, and returns its
// address.
func serveWithTimeouts(t *testing.T, h http.Handler, readTimeout time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, WriteTimeout: 2 * readTimeout}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// trickle sends a POST /mcp whose body (of the given length) arrives a byte every 100 ms, and returns how long
// the connection lasted and the status the gateway answered (0 if none): it ends when the gateway answers
// and closes, or after limit.
func trickle(addr, authorization, body string, limit time.Duration) (time.Duration, int, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if authorization != "" {
		authorization = "Authorization: " + authorization + "\r\n"
	}
	start := time.Now()
	_, err = fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\n%sContent-Length: %d\r\n\r\n", authorization, len(body))
	if err != nil {
		return 0, 0, err
	}
	status := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			status <- 0
			return
		}
		_ = resp.Body.Close()
		status <- resp.StatusCode
	}()
	for i := 0; time.Since(start) < limit; i++ {
		select {
		case code := <-status:
			return time.Since(start), code, nil
		case <-time.After(100 * time.Millisecond):
		}
		if i < len(body) {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return time.Since(start), <-status, nil
			}
		}
	}
	return time.Since(start), 0, nil
}

// /mcp lets a connection outlive the server's timeouts (tool calls and a session's stream are long) only once
// its caller is authenticated: a client without a key, or with a wrong one, that trickles a body is cut at
// the server's read timeout like any other request. An authenticated one may take longer.
//
// Fails without the fix (checked): with the deadlines extended before authentication, both unauthenticated
// clients held their connections for the whole 6 s (net/http reads a small unread body before answering).
func TestIntegrationMCPDeadlinesOnlyAfterAuthentication(t *testing.T) {
	g := newGateway(t, nil)
	_, key := g.tenant(t, 5)
	const readTimeout = time.Second
	addr := serveWithTimeouts(t, g.srv.Handler(), readTimeout)
	for _, authz := range []string{"", "Bearer alk_wrong"} {
		held, code, err := trickle(addr, authz, strings.Repeat(" ", 100_000), 6*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Authorization %q: held %v, status %d", authz, held.Round(time.Millisecond), code)
		if held > 3*readTimeout {
			t.Errorf("an unauthenticated client (Authorization %q) held its connection %v, past the read timeout of %v", authz, held, readTimeout)
		}
	}
	// An authenticated client may send its body more slowly than the server's read timeout.
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	body := initialize + strings.Repeat(" ", 25) // 2.5 s more at 10 bytes a second
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", key, len(body), initialize)
	for range 25 {
		time.Sleep(100 * time.Millisecond)
		if _, err := conn.Write([]byte(" ")); err != nil {
			t.Fatalf("the authenticated client's connection was cut after %v: %v", time.Since(start), err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("the authenticated client's slow initialize after %v: %v %v", time.Since(start), resp, err)
	}
}

// MCP sessions are bounded per tenant and in all, and each holds memory of the budget: initialize past a
// bound gets 429 with Retry-After, another tenant keeps its own share, and an ended session frees its slot. A
// flood of concurrent initializes opens no more than the bound.
//
// Fails without the fix (checked): without the session slots the fourth initialize of tenant A opened a
// session (200).
func TestIntegrationMCPSessionsBounded(t *testing.T) {
	g := newGateway(t, func(o *Options) { o.MaxMCPSessionsPerTenant, o.MaxMCPSessions = 3, 5 })
	_, keyA := g.tenant(t, 5)
	_, keyB := g.tenant(t, 5)
	open := func(key string, want int) string {
		t.Helper()
		resp, id, body, err := mcpInitialize(g.http.URL, key)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			t.Fatalf("initialize: %d %s, want %d", resp.StatusCode, body, want)
		}
		if want == http.StatusTooManyRequests && (resp.Header.Get("Retry-After") == "" || !strings.Contains(body, CodeTooManySessions)) {
			t.Fatalf("429 without Retry-After or %s: %s", CodeTooManySessions, body)
		}
		return id
	}
	var a []string
	for range 3 {
		a = append(a, open(keyA, http.StatusOK))
	}
	open(keyA, http.StatusTooManyRequests) // the tenant's bound
	open(keyB, http.StatusOK)
	open(keyB, http.StatusOK)
	open(keyB, http.StatusTooManyRequests) // the replica's bound
	if code, err := mcpDelete(g.http.URL, keyA, a[0]); err != nil || code != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: %d %v", code, err)
	}
	waitFor(t, 5*time.Second, func() bool {
		resp, id, _, err := mcpInitialize(g.http.URL, keyB)
		return err == nil && resp.StatusCode == http.StatusOK && id != ""
	})

	// A flood: 40 initializes at once, against a gateway of its own, open exactly the tenant's bound.
	g2 := newGateway(t, func(o *Options) { o.MaxMCPSessionsPerTenant = 3 })
	_, keyC := g2.tenant(t, 5)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			resp, _, _, err := mcpInitialize(g2.http.URL, keyC)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				codes[-1]++
			case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "":
				codes[-2]++
			default:
				codes[resp.StatusCode]++
			}
		})
	}
	wg.Wait()
	if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 37 {
		t.Fatalf("40 concurrent initializes: %v (status: count; -1 failed, -2 429 without Retry-After); want 3 opened, 37 refused", codes)
	}
}

// Open sessions hold memory of the budget: with a tenant's share of an initialize request and two and a half
// sessions, the third session is refused by the budget (429 memory_budget_exceeded).
//
// Fails without the fix (checked): sessions held no budget, and the third opened.
func TestIntegrationMCPSessionsHoldMemory(t *testing.T) {
	g := newGateway(t, func(o *Options) {
		o.MaxInflightBytes, o.MaxInflightBytesPerTenant = 64<<20, callOverhead+16<<10+mcpSessionCost*5/2
	})
	_, key := g.tenant(t, 5)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		resp, _, body, err := mcpInitialize(g.http.URL, key)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want || want != http.StatusOK && !strings.Contains(body, CodeOutputBudget) {
			t.Fatalf("session %d: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
	}
}

// write_file's content comes in the MCP request, which the SDK holds several times over while it decodes it:
// the request is bounded like a JSON body (--max-body-bytes, here the default 1 MiB), not like an upload.
//
// Fails without the fix (checked): with the request bounded by --max-file-bytes plus --max-body-bytes, the
// 2 MiB write was taken.
func TestIntegrationMCPWriteFileIsBoundedLikeABody(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 5)
	wd := t.TempDir()
	id := g.readySandbox(t, ns, wd)
	small := strings.Repeat("x", 512<<10)
	code, res, raw, err := mcpTool(g.http.URL, key, "write_file", map[string]any{"path": "small.txt", "content": small, "sandbox_id": id})
	if err != nil || res == nil || res.IsError {
		t.Fatalf("write_file of 512 KiB: %d %+v %s %v", code, res, raw, err)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "small.txt")); err != nil || string(b) != small {
		t.Fatalf("small.txt: %d bytes, %v", len(b), err)
	}
	code, _, raw, err = mcpTool(g.http.URL, key, "write_file", map[string]any{"path": "big.txt", "content": strings.Repeat("x", 2<<20), "sandbox_id": id})
	if err != nil || code != http.StatusRequestEntityTooLarge {
		t.Fatalf("write_file of 2 MiB: %d %s %v; want 413", code, raw, err)
	}
	if _, err := os.Stat(filepath.Join(wd, "big.txt")); err == nil {
		t.Fatal("big.txt was written")
	}
}
