package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Exec and files through the HTTP handler, the real engine and the real wrapper, against a local exec server
// (envtest runs no pods). The full pod flow is covered by the end-to-end tests on a real cluster.
func TestIntegrationExec(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	wd := t.TempDir()
	id := g.readySandbox(t, ns, wd)
	path := "/v1/sandboxes/" + id + "/exec"

	code, body := g.do(t, key, "POST", path, `{"command": "echo out; echo err >&2; pwd; exit 3"}`)
	if code != 200 || body["exit_code"] != 3.0 || body["stdout"] != "out\n"+wd+"\n" || body["stderr"] != "err\n" ||
		body["outcome"] != "exited" || body["truncated"] != false || body["duration_ms"] == nil {
		t.Fatalf("exec: %d %v", code, body)
	}
	code, body = g.do(t, key, "POST", path, map[string]any{"argv": []string{"cat"}, "stdin": "hello", "cwd": "/", "env": map[string]string{"X": "1"}})
	if code != 200 || body["stdout"] != "hello" {
		t.Fatalf("argv+stdin: %d %v", code, body)
	}
	code, body = g.do(t, key, "POST", path, `{"command": "sleep 5", "timeout_ms": 300}`)
	if code != 200 || body["outcome"] != "timeout" {
		t.Fatalf("timeout: %d %v", code, body)
	}
	// The template's outputLimitBytes (4096) is the default budget; the request may change it.
	code, body = g.do(t, key, "POST", path, `{"command": "head -c 100000 /dev/zero | tr '\\0' a"}`)
	tr, _ := body["truncation"].(map[string]any)
	so, _ := tr["stdout"].(map[string]any)
	if code != 200 || body["truncated"] != true || so["kept_bytes"] != 4096.0 || body["stdout_bytes"] != 100000.0 {
		t.Fatalf("truncation: %d truncated=%v %v", code, body["truncated"], tr)
	}
	code, body = g.do(t, key, "POST", path, `{"command": "yes", "kill_after_output_bytes": 10000, "max_output_bytes": 1024}`)
	if code != 200 || body["outcome"] != "output_limit" {
		t.Fatalf("output limit: %d %v", code, body["outcome"])
	}
	// Bad input names the field; a sandbox that is not ready is 409 with its phase.
	if code, body = g.do(t, key, "POST", path, `{"command": "x", "argv": ["y"]}`); code != 400 || errField(body) != "command" {
		t.Fatalf("both: %d %v", code, body)
	}
	if code, body = g.do(t, key, "POST", path, `{"command": "x", "timeout_ms": "soon"}`); code != 400 || errField(body) != "timeout_ms" {
		t.Fatalf("type: %d %v", code, body)
	}
	pending := g.readySandbox(t, ns, wd)
	g.setPhase(t, ns, pending, "Pending")
	if code, body = g.do(t, key, "POST", "/v1/sandboxes/"+pending+"/exec", `{"command": "true"}`); code != 409 || errPhase(body) != "pending" {
		t.Fatalf("not ready: %d %v", code, body)
	}
}

func TestIntegrationExecNDJSON(t *testing.T) {
	g := newGateway(t, nil)
	ns, key := g.tenant(t, 20)
	id := g.readySandbox(t, ns, t.TempDir())
	resp, raw := g.raw(t, key, "POST", "/v1/sandboxes/"+id+"/exec", `{"command": "echo one; echo two >&2; echo three"}`, "Accept", "application/x-ndjson")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ndjsonType {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Fatalf("no lines in %q", raw)
	}
	last := lines[len(lines)-1]
	if last["outcome"] != "exited" || last["exit_code"] != 0.0 || last["stdout"] != "one\nthree\n" {
		t.Fatalf("result line %v", last)
	}
	var out, errs strings.Builder
	for _, l := range lines[:len(lines)-1] {
		data, ok := l["data"].(string)
		switch l["stream"] {
		case "stdout":
			out.WriteString(data)
		case "stderr":
			errs.WriteString(data)
		}
		switch {
		case !ok, l["stream"] != "stdout" && l["stream"] != "stderr":
			t.Fatalf("chunk line %v", l)
		}
	}
	if out.String() != "one\nthree\n" || errs.String() != "two\n" {
		t.Fatalf("chunks: %q %q", out.String(), errs.String())
	}
}

func TestIntegrationFiles(t *testing.T) {
	g := newGateway(t, func(o *Options) { o.MaxFileBytes = 1 << 20 })
	ns, key := g.tenant(t, 20)
	wd := t.TempDir()
	id := g.readySandbox(t, ns, wd)
	files := "/v1/sandboxes/" + id + "/files?path="
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(i * 7) // binary, not UTF-8
	}
	if code, body := g.do(t, key, "PUT", files+"bin.dat", data); code != 200 || body["bytes"] != float64(len(data)) {
		t.Fatalf("put: %d %v", code, body)
	}
	if got, _ := os.ReadFile(filepath.Join(wd, "bin.dat")); !bytes.Equal(got, data) {
		t.Fatal("file on disk differs")
	}
	resp, got := g.raw(t, key, "GET", files+"bin.dat", nil)
	if resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("get: %d, %d bytes", resp.StatusCode, len(got))
	}
	// Overwrite is atomic (rename), no temporary file left behind.
	if code, _ := g.do(t, key, "PUT", files+wd+"/bin.dat", "small"); code != 200 {
		t.Fatalf("overwrite: %d", code)
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 1 {
		t.Fatalf("leftovers in %s: %v", wd, ents)
	}
	// Absolute paths anywhere the sandbox user may write, relative ones under the working directory, through
	// symlinks too. The exec server runs commands on this machine, so every target is a decoy under the test's
	// temporary directories, never a real system file.
	decoy := t.TempDir()
	secret := []byte("decoy: written by the test\n")
	if err := os.WriteFile(filepath.Join(decoy, "passwd"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(decoy, filepath.Join(wd, "etc")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{decoy + "/passwd", "etc/passwd"} {
		if resp, got := g.raw(t, key, "GET", files+url.QueryEscape(p), nil); resp.StatusCode != 200 || !bytes.Equal(got, secret) {
			t.Errorf("GET %s: %d %q", p, resp.StatusCode, got)
		}
	}
	if code, body := g.do(t, key, "PUT", files+url.QueryEscape(decoy+"/new/deeper/f"), "abs"); code != 200 {
		t.Errorf("PUT absolute with missing parents: %d %v", code, body)
	}
	if got, err := os.ReadFile(filepath.Join(decoy, "new", "deeper", "f")); err != nil || string(got) != "abs" {
		t.Errorf("absolute upload: %q %v", got, err)
	}
	if code, _ := g.do(t, key, "PUT", files+"etc/evil", "via dir link"); code != 200 {
		t.Errorf("PUT through a directory symlink: %d", code)
	}
	if got, err := os.ReadFile(filepath.Join(decoy, "evil")); err != nil || string(got) != "via dir link" {
		t.Errorf("upload through the directory symlink: %q %v", got, err)
	}
	// A symlink at the name itself is replaced, not followed: the write is a rename onto the name.
	if err := os.Symlink(filepath.Join(decoy, "passwd"), filepath.Join(wd, "link")); err != nil {
		t.Fatal(err)
	}
	if code, _ := g.do(t, key, "PUT", files+"link", "replaced"); code != 200 {
		t.Errorf("PUT onto a symlink: %d", code)
	}
	if got, err := os.ReadFile(filepath.Join(decoy, "passwd")); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("wrote through the symlink at the name: %q %v", got, err)
	}
	if fi, err := os.Lstat(filepath.Join(wd, "link")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the symlink was not replaced by the file: %v %v", fi, err)
	}
	for _, p := range []string{"../x", "a/../b"} {
		for _, m := range []string{"GET", "PUT"} {
			if code, body := g.do(t, key, m, files+url.QueryEscape(p), "x"); code != 400 || errField(body) != "path" {
				t.Errorf("%s %s: %d %v, want 400 naming path", m, p, code, body)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(wd), "x")); err == nil {
		t.Fatal("wrote outside the working directory")
	}
	if err := os.Remove(filepath.Join(wd, "link")); err != nil {
		t.Fatal(err)
	}
	if code, _ := g.do(t, key, "GET", files+"missing", nil); code != 404 {
		t.Errorf("missing file: %d", code)
	}
	if code, _ := g.do(t, key, "PUT", files+"made/on/demand/f", "x"); code != 200 {
		t.Errorf("missing parents are created: %d", code)
	}
	// One missing level too: GNU realpath accepts a missing last component, so this is a case of its own.
	if code, body := g.do(t, key, "PUT", files+"made/once", "y"); code != 200 {
		t.Errorf("a missing parent one level down is created: %d %v", code, body)
	}
	if code, body := g.do(t, key, "PUT", files+"onelevel/f", "z"); code != 200 {
		t.Errorf("a missing parent directory is created: %d %v", code, body)
	} else if got, err := os.ReadFile(filepath.Join(wd, "onelevel", "f")); err != nil || string(got) != "z" {
		t.Errorf("onelevel/f: %q %v", got, err)
	}
	if err := os.RemoveAll(filepath.Join(wd, "onelevel")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(wd, "made")); err != nil {
		t.Fatal(err)
	}
	if code, body := g.do(t, key, "PUT", files+"big", make([]byte, 1<<20+1)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("too big: %d %v", code, body)
	}
	// Streamed without a length: refused once the limit is crossed, nothing left behind.
	over := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), strings.NewReader("xx"))
	if code, body := g.do(t, key, "PUT", files+"big2", over); code != http.StatusRequestEntityTooLarge {
		t.Errorf("streamed too big: %d %v", code, body)
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 2 { // bin.dat and the etc symlink
		t.Errorf("leftovers in %s: %v", wd, ents)
	}
	if err := os.WriteFile(filepath.Join(wd, "huge"), make([]byte, 1<<20+10), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := g.do(t, key, "GET", files+"huge", nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("download too big: %d", code)
	}
}

func errPhase(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	p, _ := e["phase"].(string)
	return p
}
