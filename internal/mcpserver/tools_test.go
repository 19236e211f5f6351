package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock.dev/airlock/pkg/client"
)

// fakeGateway keeps sandboxes (with their metadata) and answers exec with the command echoed; enough to see
// which sandbox each tool call reaches. The real gateway is in test/e2e TestMCP.
type fakeGateway struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]map[string]string // id -> metadata
	creates   int
}

func (f *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"), "/")[0]
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.next++
		f.creates++
		id := fmt.Sprintf("sbx-%d", f.next)
		if req.Metadata == nil {
			req.Metadata = map[string]string{} // nil marks a missing sandbox
		}
		f.sandboxes[id] = req.Metadata
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "ready"})
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes":
		var list []map[string]any
		for id, md := range f.sandboxes {
			list = append(list, map[string]any{"id": id, "status": "ready", "metadata": md})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": list})
	case f.sandboxes[id] == nil:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"sandbox `+id+` not found"}}`)
	case r.Method == "GET":
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "ready", "template": "python-node"})
	case r.Method == "DELETE":
		delete(f.sandboxes, id)
		w.WriteHeader(http.StatusOK)
	case r.Method == "PUT" && strings.HasSuffix(r.URL.Path, "/files"):
		_, _ = io.Copy(io.Discard, r.Body)
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Query().Get("path")})
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/exec"):
		var req struct {
			Command string `json:"command"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(map[string]any{"exit_code": 0, "outcome": "exited", "stdout": id + ": " + req.Command + "\n"})
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

// setup returns the fake gateway and a server; connection: its transport is one connection (in memory).
func setup(t *testing.T, connection bool) (*fakeGateway, *Sessions, *mcp.Server) {
	f := &fakeGateway{sandboxes: map[string]map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.New(client.Options{BaseURL: srv.URL, APIKey: "alk_test"})
	if err != nil {
		t.Fatal(err)
	}
	sessions := NewSessions(logr.Discard())
	s := NewServer(Options{Sessions: sessions, Connection: connection, Backend: func(context.Context, *mcp.CallToolRequest) (Backend, error) { return ClientBackend(c), nil }})
	return f, sessions, s
}

func connect(t *testing.T, s *mcp.Server, version string) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text string
	defer func() { t.Logf("%s %v: error %v: %s", name, args, res.IsError, text) }()
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return text, out, res.IsError
}

func TestToolsAndAnnotations(t *testing.T) {
	_, _, s := setup(t, true)
	cs := connect(t, s, "2025-11-25")
	defer cs.Close()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	for _, tool := range res.Tools {
		readOnly[tool.Name] = tool.Annotations.ReadOnlyHint
		if tool.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
		}
	}
	want := map[string]bool{"run_command": false, "run_python": false, "write_file": false, "read_file": true,
		"list_files": true, "create_sandbox": false, "delete_sandbox": false}
	for name, ro := range want {
		if got, ok := readOnly[name]; !ok || got != ro {
			t.Errorf("tool %s: listed %v, read-only %v; want read-only %v", name, ok, got, ro)
		}
	}
}

func TestASessionHasOneSandboxUntilItEnds(t *testing.T) {
	f, _, s := setup(t, true)
	cs := connect(t, s, "2025-11-25")
	text, out, _ := call(t, cs, "run_command", map[string]any{"command": "echo 1"})
	id, _ := out["sandbox_id"].(string)
	if !strings.HasPrefix(text, "exit_code: 0\n") || !strings.HasSuffix(text, "sandbox_id: "+id) || out["stdout"] != id+": echo 1\n" {
		t.Fatalf("first call: %q %v", text, out)
	}
	if _, out, _ := call(t, cs, "run_command", map[string]any{"command": "echo 2"}); out["sandbox_id"] != id || f.creates != 1 {
		t.Fatalf("second call: %v, %d creates; want the same sandbox", out, f.creates)
	}
	if md := f.sandboxes[id]; md[MetadataSession] == "" {
		t.Errorf("the sandbox's metadata %v does not name the session", md)
	}
	if _, _, isErr := call(t, cs, "create_sandbox", nil); !isErr {
		t.Error("create_sandbox in a session with a sandbox is no error")
	}
	if _, _, isErr := call(t, cs, "run_command", map[string]any{"command": "x", "sandbox_id": "sbx-none"}); !isErr {
		t.Error("an unknown sandbox_id is no error")
	}
	_ = cs.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.sandboxes)
		f.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session's end did not delete its sandbox")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDeleteThenANewSandbox(t *testing.T) {
	f, sessions, s := setup(t, true)
	cs := connect(t, s, "2025-11-25")
	defer cs.Close()
	_, out, _ := call(t, cs, "run_command", map[string]any{"command": "true"})
	if _, d, _ := call(t, cs, "delete_sandbox", nil); d["deleted"] != true || d["sandbox_id"] != out["sandbox_id"] {
		t.Fatalf("delete_sandbox: %v", d)
	}
	if _, again, _ := call(t, cs, "run_command", map[string]any{"command": "true"}); again["sandbox_id"] == out["sandbox_id"] || f.creates != 2 {
		t.Fatalf("after delete_sandbox: %v", again)
	}
	sessions.Close() // shutdown deletes what sessions hold
	if len(f.sandboxes) != 0 {
		t.Errorf("left after Close: %v", f.sandboxes)
	}
}

// A 2026-07-28 request outside any session is sessionless: without sandbox_id it gets a new sandbox, which
// outlives the request, and the result names it.
func TestSessionlessCallsPassTheSandboxID(t *testing.T) {
	f, _, s := setup(t, false)
	h := httptest.NewServer(NewHTTPHandler(func(*http.Request) *mcp.Server { return s }, mcp.StreamableHTTPOptions{}))
	t.Cleanup(h.Close)
	sandboxID := regexp.MustCompile(`sandbox_id\\?":\\?"(sbx-\d+)`)
	callRaw := func(args string) string {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":` + args +
			`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, _ := http.NewRequest("POST", h.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "run_command")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := sandboxID.FindStringSubmatch(string(b))
		if resp.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("sessionless call: %d %s", resp.StatusCode, b)
		}
		return m[1]
	}
	a, b := callRaw(`{"command":"true"}`), callRaw(`{"command":"true"}`)
	if a == b || f.creates != 2 {
		t.Fatalf("sessionless calls without sandbox_id reached %s and %s; want a new sandbox each", a, b)
	}
	if c := callRaw(`{"command":"true","sandbox_id":"` + a + `"}`); c != a || f.creates != 2 {
		t.Fatalf("with sandbox_id %s: reached %s", a, c)
	}
	time.Sleep(100 * time.Millisecond) // a request's end must not delete its sandbox
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sandboxes) != 2 {
		t.Errorf("sandboxes after the requests: %v", f.sandboxes)
	}
}

func TestADiscoveringClientIsSessionless(t *testing.T) {
	f, _, s := setup(t, false)
	h := httptest.NewServer(NewHTTPHandler(func(*http.Request) *mcp.Server { return s }, mcp.StreamableHTTPOptions{}))
	t.Cleanup(h.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: h.URL, MaxRetries: -1}, nil) // 2026-07-28: server/discover
	if err != nil {
		t.Fatal(err)
	}
	_, out, _ := call(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "x"})
	_, out2, _ := call(t, cs, "run_command", map[string]any{"command": "true", "sandbox_id": out["sandbox_id"]})
	if out["sandbox_id"] == nil || out2["sandbox_id"] != out["sandbox_id"] || f.creates != 1 {
		t.Fatalf("a sessionless client's calls: %v %v; want the sandbox it names", out, out2)
	}
	if _, out3, _ := call(t, cs, "run_command", map[string]any{"command": "true"}); out3["sandbox_id"] == out["sandbox_id"] || f.creates != 2 {
		t.Fatalf("a call without sandbox_id: %v; want a new sandbox", out3)
	}
	_ = cs.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sandboxes) != 2 {
		t.Errorf("sessionless sandboxes are the model's to delete: %v", f.sandboxes)
	}
}
