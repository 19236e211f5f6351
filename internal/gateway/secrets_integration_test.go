package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/mcpserver"
)

// A scoped secret's value, made of characters that occur nowhere else in these tests, so that any four of
// them in a row in an answer are a piece of it.
const testSecret = "zq7-Xw9pL2mN8vR4tK6yJ3"

// secretSandbox makes a Ready sandbox with scoped secrets, stored as a create through the API stores them,
// whose working directory is a local directory.
func (g *gw) secretSandbox(tb testing.TB, ns, workDir string, secrets map[string]string) string {
	tb.Helper()
	sb := &airlockv1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "sbx-", Namespace: ns, Annotations: map[string]string{}},
		Spec: airlockv1.SandboxSpec{TemplateRef: &airlockv1.TemplateReference{Name: "python-node"}, WorkingDir: workDir}}
	markSecrets(sb, secrets)
	if err := g.c.Create(context.Background(), sb); err != nil {
		tb.Fatal(err)
	}
	if e := g.srv.storeSecrets(context.Background(), sb, secrets); e != nil {
		tb.Fatal(e)
	}
	g.markReady(tb, ns, sb.Name)
	return sb.Name
}

// pieceOf is the first run of four or more characters of secret in text, "" if there is none.
func pieceOf(text, secret string) string {
	for n := len(secret); n >= 4; n-- {
		for i := 0; i+n <= len(secret); i++ {
			if strings.Contains(text, secret[i:i+n]) {
				return secret[i : i+n]
			}
		}
	}
	return ""
}

// Scoped secrets are masked wherever sandbox bytes leave the gateway, each path tried with a real secret
// value in the environment of real commands: a file download, MCP's read_file (also with the value across the
// end of what it shows), error messages, a background process's view, a command's output cut by the truncation
// marker through the middle of the value, and streamed output whose chunks split the value.
//
// Fails without each path's masking (checked, one at a time): the download carried the value six times;
// read_file showed it, and at its cap its first six characters; the upload's error message and the command's
// detail quoted it; a background process's view quoted it in its command; the truncated output showed its start before the marker and its end after; without the
// hold-back the first streamed chunk carried its first eleven characters (and read_file, which reads as far
// past its cap, showed the start of the value at the cap).
func TestIntegrationSecretsMaskedEverywhere(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 5)
	wd := t.TempDir()
	id := g.secretSandbox(t, ns, wd, map[string]string{"GIT_TOKEN": testSecret})
	write := func(name string, content []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(wd, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("download", func(t *testing.T) {
		// The value at offsets that cross the decoder's pieces (the exec stream's chunks of base64).
		var file, want bytes.Buffer
		for _, off := range []int{0, 1000, 65534, 98300, 131071, 300000} {
			pad := bytes.Repeat([]byte{'a'}, off-file.Len())
			file.Write(pad)
			file.WriteString(testSecret)
			want.Write(pad)
			want.WriteString("[masked:GIT_TOKEN]")
		}
		write("secret.bin", file.Bytes())
		resp, body := g.raw(t, key, "GET", "/v1/sandboxes/"+id+"/files?path=secret.bin", nil)
		if resp.StatusCode != 200 || !bytes.Equal(body, want.Bytes()) {
			t.Fatalf("download: %d, %d bytes, piece %q of the value; want %d bytes, all masked", resp.StatusCode, len(body),
				pieceOf(string(body), testSecret), want.Len())
		}
		if resp.ContentLength != -1 {
			t.Errorf("a masked download has Content-Length %d: masking changes the size", resp.ContentLength)
		}
	})

	t.Run("mcp read_file", func(t *testing.T) {
		write("notes.txt", []byte("token: "+testSecret+"\n"))
		// The value starting just before read_file's cap: it must not show even in part.
		write("long.txt", append(bytes.Repeat([]byte{'a'}, mcpserver.ReadFileTextLimit-6), testSecret+"\nmore\n"...))
		for file, want := range map[string]string{"notes.txt": "token: [masked:GIT_TOKEN]\n", "long.txt": strings.Repeat("a", mcpserver.ReadFileTextLimit-6)} {
			code, res, raw, err := mcpTool(g.http.URL, key, "read_file", map[string]any{"path": file, "sandbox_id": id})
			if err != nil || res == nil || res.IsError {
				t.Fatalf("read_file %s: %d %+v %s %v", file, code, res, raw, err)
			}
			if res.Structured["content"] != want || pieceOf(res.Text, testSecret) != "" {
				t.Errorf("read_file %s: content %q..., text shows %q of the value", file, shortenS(res.Structured["content"]), pieceOf(res.Text, testSecret))
			}
		}
	})

	t.Run("error messages", func(t *testing.T) {
		write("plain", []byte("x"))
		code, body := g.do(t, key, "PUT", "/v1/sandboxes/"+id+"/files?path=plain/"+testSecret+"/f", "data")
		msg := fmt.Sprint(body["error"])
		if code != 400 || pieceOf(msg, testSecret) != "" || !strings.Contains(msg, "[masked:GIT_TOKEN]") {
			t.Errorf("upload under a file: %d %s", code, msg)
		}
		code, body = g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"./" + testSecret}})
		if code != 200 || pieceOf(fmt.Sprint(body), testSecret) != "" {
			t.Errorf("a command that cannot start: %d %v", code, body)
		}
	})

	t.Run("background process", func(t *testing.T) {
		// Its view quotes its command as the sandbox's PID 1 reports it, and its output comes from its files.
		argv := []string{"sh", "-c", `printf %s "$GIT_TOKEN"`, "sh", testSecret}
		code, body := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": argv, "background": true})
		pid, _ := body["process_id"].(string)
		if code != 202 || pieceOf(fmt.Sprint(body), testSecret) != "" {
			t.Fatalf("start: %d %v", code, body)
		}
		for _, path := range []string{"/processes/" + pid + "?wait_ms=5000", "/processes"} {
			code, body = g.do(t, key, "GET", "/v1/sandboxes/"+id+path, nil)
			if code != 200 || pieceOf(fmt.Sprint(body), testSecret) != "" || !strings.Contains(fmt.Sprint(body), "[masked:GIT_TOKEN]") {
				t.Errorf("GET %s: %d %v", path, code, body)
			}
		}
	})

	t.Run("truncation marker", func(t *testing.T) {
		// max_output_bytes 1024 keeps a head of 256 and a tail of 768 bytes: the value starts at 250 and ends
		// after the tail's start, so the marker replaces its middle.
		cmd := `head -c 250 /dev/zero | tr '\0' a; printf %s "$GIT_TOKEN"; head -c 760 /dev/zero | tr '\0' b`
		code, body := g.do(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": cmd, "max_output_bytes": 1024})
		out, _ := body["stdout"].(string)
		if code != 200 || body["truncated"] != true || !strings.Contains(out, "bytes omitted") {
			t.Fatalf("exec: %d %v", code, body)
		}
		if p := pieceOf(out, testSecret); p != "" || strings.Count(out, "[masked:GIT_TOKEN]") != 2 {
			t.Errorf("the output shows %q of the value around the marker: %q", p, out[200:min(len(out), 400)])
		}
	})

	t.Run("streamed chunks", func(t *testing.T) {
		cmd := `printf %s "$GIT_TOKEN" | head -c 11; sleep 0.5; printf %s "$GIT_TOKEN" | tail -c +12; echo`
		resp, raw := g.raw(t, key, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": cmd}, "Accept", "application/x-ndjson")
		if resp.StatusCode != 200 {
			t.Fatalf("exec: %d %s", resp.StatusCode, raw)
		}
		var streamed string
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			data, _ := line["data"].(string)
			if p := pieceOf(data, testSecret); p != "" || pieceOf(fmt.Sprint(line["stdout"]), testSecret) != "" {
				t.Fatalf("a line shows %q of the value: %s", p, sc.Text())
			}
			streamed += data
		}
		if streamed != "[masked:GIT_TOKEN]\n" {
			t.Errorf("streamed %q", streamed)
		}
	})
}

func shortenS(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}
