package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	gwapi "airlock.dev/airlock/internal/gateway"
	"airlock.dev/airlock/internal/mcpserver"
)

// bearer adds the API key to every request of an MCP client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t *testing.T, transport mcp.Transport, version string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting (protocol %q): %v", version, err)
	}
	t.Cleanup(func() { _ = cs.Close() }) // a failed test ends its session too, so that its sandbox goes
	return cs
}

func httpTransport(g *gatewayProc, key, query string) *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp" + query, HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1}
}

// callTool calls a tool and returns its text and structured content.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (text string, out map[string]any, isErr bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
	}
	t.Logf("%s %v -> error=%v\n%s", name, args, res.IsError, text)
	return text, out, res.IsError
}

func sandboxesOf(t *testing.T, ns string) []airlockv1.Sandbox {
	t.Helper()
	var list airlockv1.SandboxList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var live []airlockv1.Sandbox
	for _, sb := range list.Items {
		if sb.DeletionTimestamp == nil {
			live = append(live, sb)
		}
	}
	return live
}

// TestMCP drives the gateway's /mcp with the Go SDK's client (a session, and the sessionless protocol),
// `airlock mcp` over stdio, and the npm @modelcontextprotocol/sdk client: tools listed with their
// annotations, the KeyError → fix loop, a files round trip, the session's end deleting its sandbox, another
// tenant's sandbox_id not found, no key 401.
func TestMCP(t *testing.T) {
	g := gateway(t)
	ns, key := gatewayTenant(t, 5)
	otherNS, otherKey := gatewayTenant(t, 2)

	t.Run("NoKey", func(t *testing.T) {
		for _, auth := range []string{"", "Bearer alk_not_a_key"} {
			req, _ := http.NewRequest("POST", g.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
			}
		}
	})

	t.Run("GoSession", func(t *testing.T) {
		cs := mcpConnect(t, httpTransport(g, key, "?template=python-node"), "2025-11-25")
		tools, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*mcp.Tool{}
		for _, tool := range tools.Tools {
			got[tool.Name] = tool
		}
		for _, name := range []string{"run_command", "run_python", "write_file", "read_file", "list_files", "create_sandbox", "delete_sandbox"} {
			if got[name] == nil {
				t.Fatalf("tool %s missing: %v", name, tools.Tools)
			}
		}
		if a := got["read_file"].Annotations; a == nil || !a.ReadOnlyHint {
			t.Errorf("read_file is not read-only: %+v", a)
		}
		if a := got["delete_sandbox"].Annotations; a == nil || a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Errorf("delete_sandbox is not destructive: %+v", a)
		}

		// The model's loop: a KeyError, read from the observation, then the fix.
		text, out, isErr := callTool(t, cs, "run_python", map[string]any{"code": "counts = {'a': 1}\nprint(counts['b'])\n"})
		if isErr || !strings.HasPrefix(text, "exit_code: 1\n") || !strings.Contains(text, "KeyError: 'b'") || out["exit_code"] != float64(1) {
			t.Fatalf("KeyError observation: %q %v", text, out)
		}
		id, _ := out["sandbox_id"].(string)
		text, out, _ = callTool(t, cs, "run_python", map[string]any{"code": "counts = {'a': 1}\nprint(counts.get('b', 0))\n"})
		if !strings.HasPrefix(text, "exit_code: 0\n") || out["stdout"] != "0\n" || out["sandbox_id"] != id {
			t.Fatalf("the fix: %q %v (want the same sandbox %s)", text, out, id)
		}
		if _, out, _ := callTool(t, cs, "run_command", map[string]any{"command": "sleep 5", "timeout_ms": 1000}); out["exit_code"] != float64(124) || out["outcome"] != "timeout" {
			t.Errorf("timeout: %v", out)
		}

		// Files round trip.
		if _, _, isErr := callTool(t, cs, "write_file", map[string]any{"path": "plan.md", "content": "step 1\nstep 2 ✓\n"}); isErr {
			t.Fatal("write_file failed")
		}
		if text, _, _ := callTool(t, cs, "read_file", map[string]any{"path": "plan.md"}); text != "step 1\nstep 2 ✓\n" {
			t.Errorf("read_file: %q", text)
		}
		if _, out, _ := callTool(t, cs, "list_files", map[string]any{"path": "."}); !strings.Contains(fmt.Sprint(out["entries"]), "plan.md") {
			t.Errorf("list_files: %v", out)
		}
		if _, _, isErr := callTool(t, cs, "read_file", map[string]any{"path": "nope.txt"}); !isErr {
			t.Error("read_file of a missing file is no tool error")
		}
		// A file longer than read_file returns: its start (read with the image's head -c), and what it left out.
		if _, out, _ := callTool(t, cs, "run_command", map[string]any{"command": `head -c 200000 /dev/zero | tr '\0' x > big.txt`}); out["exit_code"] != float64(0) {
			t.Fatalf("writing big.txt: %v", out)
		}
		if text, out, _ := callTool(t, cs, "read_file", map[string]any{"path": "big.txt"}); out["truncated"] != true || out["bytes"] != float64(200000) ||
			out["omitted_bytes"] != float64(200000-mcpserver.ReadFileTextLimit) || !strings.Contains(text, "[airlock: 134464 bytes omitted;") {
			t.Errorf("read_file of 200000 bytes: truncated %v, bytes %v, omitted %v", out["truncated"], out["bytes"], out["omitted_bytes"])
		}

		// The mapping is on the Sandbox, and there is one sandbox for the session.
		live := sandboxesOf(t, ns)
		if len(live) != 1 || live[0].Name != id || !strings.Contains(live[0].Annotations[gwapi.AnnotationMetadata], mcpserver.MetadataSession) {
			t.Fatalf("sandboxes of the session: %v", live)
		}
		// Another tenant's key does not reach this sandbox.
		other := mcpConnect(t, httpTransport(g, otherKey, ""), "")
		if text, _, isErr := callTool(t, other, "run_command", map[string]any{"command": "true", "sandbox_id": id}); !isErr || !strings.Contains(text, "not found") {
			t.Errorf("another tenant's sandbox_id: %q, want not found", text)
		}
		_ = other.Close()
		if len(sandboxesOf(t, otherNS)) != 0 {
			t.Error("the other tenant's failed call left a sandbox")
		}

		// The session's end deletes its sandbox.
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
		noSandboxLeft(t, ns)
	})

	t.Run("GoSessionless", func(t *testing.T) {
		cs := mcpConnect(t, httpTransport(g, key, ""), "") // the SDK's newest protocol, 2026-07-28: no session
		defer cs.Close()
		_, out, isErr := callTool(t, cs, "run_command", map[string]any{"command": "echo hi > f.txt && cat f.txt"})
		id, _ := out["sandbox_id"].(string)
		if isErr || id == "" || out["stdout"] != "hi\n" {
			t.Fatalf("first call: %v", out)
		}
		if text, _, _ := callTool(t, cs, "read_file", map[string]any{"path": "f.txt", "sandbox_id": id}); text != "hi\n" {
			t.Errorf("a later call with the sandbox_id: %q", text)
		}
		// No session: a call without sandbox_id gets a sandbox of its own.
		_, out2, _ := callTool(t, cs, "run_command", map[string]any{"command": "test -e f.txt || echo fresh"})
		if id2, _ := out2["sandbox_id"].(string); id2 == "" || id2 == id || out2["stdout"] != "fresh\n" {
			t.Errorf("a sessionless call without sandbox_id: %v; want a new sandbox", out2)
		}
		for _, sb := range []any{id, out2["sandbox_id"]} {
			if _, out, _ := callTool(t, cs, "delete_sandbox", map[string]any{"sandbox_id": sb}); out["deleted"] != true {
				t.Errorf("delete_sandbox: %v", out)
			}
		}
		noSandboxLeft(t, ns)
	})

	t.Run("Stdio", func(t *testing.T) {
		cmd := exec.Command(airlockCLI(t), "mcp", "--network", "none")
		cmd.Env = append(os.Environ(), "AIRLOCK_API_URL="+g.base, "AIRLOCK_API_KEY="+key, "XDG_CONFIG_HOME="+t.TempDir())
		cs := mcpConnect(t, &mcp.CommandTransport{Command: cmd}, "2025-11-25")
		if text, _, _ := callTool(t, cs, "run_command", map[string]any{"command": "python3 -c 'print(6*7)'"}); !strings.Contains(text, "stdout:\n42") {
			t.Errorf("run_command over stdio: %q", text)
		}
		if len(sandboxesOf(t, ns)) != 1 {
			t.Error("want the session's one sandbox")
		}
		if err := cs.Close(); err != nil {
			t.Logf("closing the stdio session: %v", err)
		}
		noSandboxLeft(t, ns)
	})

	t.Run("TypeScript", func(t *testing.T) {
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		run := func(dir, name string, args ...string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Dir = filepath.Join(root, dir)
			cmd.Env = append(os.Environ(), "AIRLOCK_API_URL="+g.base, "AIRLOCK_API_KEY="+key, "AIRLOCK_OTHER_API_KEY="+otherKey)
			out, err := cmd.CombinedOutput()
			t.Logf("%s %v:\n%s", name, args, out)
			if err != nil {
				t.Fatalf("%s %v: %v", name, args, err)
			}
			return string(out)
		}
		run(".", "hack/npm-deps.sh", "test/mcp/client-ts")
		out := run("test/mcp/client-ts", "npm", "test")
		if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0") || !strings.Contains(out, "# skipped 0") {
			t.Fatal("the TypeScript client's tests did not all pass")
		}
		noSandboxLeft(t, ns)
	})
}
