package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// fakeGateway is enough of the gateway's REST API for the CLI: sandboxes, exec (JSON and NDJSON) and files.
type fakeGateway struct {
	mu        sync.Mutex
	sandboxes map[string]bool
	files     map[string][]byte
	execs     []map[string]any
	// result answers an exec request with stdout chunks and the final result.
	result func(req map[string]any) (chunks []string, res map[string]any)
}

func newFakeGateway(t *testing.T) (*fakeGateway, string) {
	f := &fakeGateway{sandboxes: map[string]bool{}, files: map[string][]byte{}}
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer alk_test" {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"error":{"code":"unauthenticated","message":"invalid or revoked API key"}}`)
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if id := r.PathValue("id"); id != "" && !f.sandboxes[id] {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"sandbox `+id+` not found"}}`)
				return
			}
			h(w, r)
		}
	}
	info := func(id string) map[string]any {
		return map[string]any{"id": id, "status": "ready", "template": "python-node", "working_dir": "/workspace",
			"created_at": time.Now().Add(-time.Minute).Format(time.RFC3339), "expires_at": time.Now().Add(time.Hour).Format(time.RFC3339)}
	}
	mux.HandleFunc("POST /v1/sandboxes", auth(func(w http.ResponseWriter, _ *http.Request) {
		id := fmt.Sprintf("sbx-%d", len(f.sandboxes)+1)
		f.sandboxes[id] = true
		_ = json.NewEncoder(w).Encode(info(id))
	}))
	mux.HandleFunc("GET /v1/sandboxes", auth(func(w http.ResponseWriter, _ *http.Request) {
		list := []map[string]any{}
		for id := range f.sandboxes {
			list = append(list, info(id))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": list})
	}))
	mux.HandleFunc("GET /v1/sandboxes/{id}", auth(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(info(r.PathValue("id")))
	}))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", auth(func(w http.ResponseWriter, r *http.Request) {
		delete(f.sandboxes, r.PathValue("id"))
		w.WriteHeader(http.StatusAccepted)
	}))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", auth(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.files[r.PathValue("id")+":"+r.URL.Query().Get("path")] = b
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", auth(func(w http.ResponseWriter, r *http.Request) {
		b, ok := f.files[r.PathValue("id")+":"+r.URL.Query().Get("path")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no such file"}}`)
			return
		}
		_, _ = w.Write(b)
	}))
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", auth(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.execs = append(f.execs, req)
		chunks, res := f.result(req)
		if r.Header.Get("Accept") != "application/x-ndjson" {
			_ = json.NewEncoder(w).Encode(res)
			return
		}
		enc := json.NewEncoder(w)
		for _, c := range chunks {
			_ = enc.Encode(map[string]string{"stream": "stdout", "data": c})
		}
		_ = enc.Encode(res)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

type result struct {
	code        int
	out, errOut string
}

// airlock runs the CLI with the gateway at url, the environment cleared of the caller's key and a fresh
// config directory.
func airlock(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	t.Setenv("AIRLOCK_API_URL", url)
	t.Setenv("AIRLOCK_API_KEY", "alk_test")
	if os.Getenv("XDG_CONFIG_HOME") == "" || !strings.HasPrefix(os.Getenv("XDG_CONFIG_HOME"), os.TempDir()) {
		t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), "airlock", args, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func exited(code int, stdout string) func(map[string]any) ([]string, map[string]any) {
	return func(map[string]any) ([]string, map[string]any) {
		return []string{stdout}, map[string]any{"exit_code": code, "outcome": "exited", "stdout": stdout, "duration_ms": 5,
			"truncation": map[string]any{"stdout": map[string]any{}, "stderr": map[string]any{}}}
	}
}

func TestExecStreamsAndPropagatesTheExitCode(t *testing.T) {
	f, url := newFakeGateway(t)
	id := strings.TrimSpace(airlock(t, url, "", "create").out)
	f.result = exited(3, "hello\n")
	r := airlock(t, url, "", "exec", id, "--", "python3", "-c", "print('hello'); exit(3)")
	if r.code != 3 || r.out != "hello\n" {
		t.Fatalf("exec: %+v, want exit 3 and hello streamed", r)
	}
	argv, _ := json.Marshal(f.execs[0]["argv"])
	if string(argv) != `["python3","-c","print('hello'); exit(3)"]` || f.execs[0]["command"] != nil {
		t.Errorf("exec request %v: want the argv after --, no shell", f.execs[0])
	}
	f.result = exited(0, "1\n")
	if r := airlock(t, url, "", "exec", id, "--sh", "ls | wc -l", "--timeout", "5s"); r.code != 0 {
		t.Fatalf("exec --sh: %+v", r)
	}
	if f.execs[1]["command"] != "ls | wc -l" || f.execs[1]["timeout_ms"] != float64(5000) {
		t.Errorf("exec --sh request %v", f.execs[1])
	}
	r = airlock(t, url, "", "exec", id, "--json", "--", "true")
	var res map[string]any
	if err := json.Unmarshal([]byte(r.out), &res); err != nil || res["exit_code"] != float64(0) || res["stdout"] != "1\n" {
		t.Errorf("exec --json: %q (%v)", r.out, err)
	}
}

func TestExecTimeoutExits124AndSaysWhatWasCut(t *testing.T) {
	f, url := newFakeGateway(t)
	id := strings.TrimSpace(airlock(t, url, "", "create").out)
	f.result = func(map[string]any) ([]string, map[string]any) {
		return []string{"tick\n"}, map[string]any{"exit_code": -1, "outcome": "timeout", "duration_ms": 1000, "truncated": true,
			"truncation": map[string]any{"stdout": map[string]any{"truncated": true, "omitted_bytes": 999, "full_output_path": "/home/sandbox/.airlock/out/x.stdout"}}}
	}
	r := airlock(t, url, "", "exec", id, "--", "sleep", "100")
	if r.code != exitTimeout {
		t.Errorf("exit %d, want 124", r.code)
	}
	for _, want := range []string{"ran out of time", "stdout was cut in the result: 999 bytes omitted", "airlock cp " + id + ":/home/sandbox/.airlock/out/x.stdout ."} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr %q lacks %q", r.errOut, want)
		}
	}
}

func TestRunDeletesTheSandbox(t *testing.T) {
	f, url := newFakeGateway(t)
	f.result = exited(0, "42\n")
	r := airlock(t, url, "", "run", "--", "python3", "-c", "print(6*7)")
	if r.code != 0 || r.out != "42\n" {
		t.Fatalf("run: %+v", r)
	}
	f.result = exited(1, "")
	if r := airlock(t, url, "", "run", "--sh", "false"); r.code != 1 {
		t.Fatalf("run of a failing command: %+v, want exit 1", r)
	}
	if len(f.sandboxes) != 0 {
		t.Errorf("sandboxes left after run: %v", f.sandboxes)
	}
}

func TestCopyBothWays(t *testing.T) {
	_, url := newFakeGateway(t)
	id := strings.TrimSpace(airlock(t, url, "", "create").out)
	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(src, []byte("payload\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := airlock(t, url, "", "cp", src, id+":/workspace/"); r.code != 0 {
		t.Fatalf("upload: %+v", r)
	}
	if r := airlock(t, url, "", "cp", id+":/workspace/in.txt", filepath.Join(dir, "out")); r.code != 0 {
		t.Fatalf("download: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out")); string(b) != "payload\n" {
		t.Errorf("downloaded %q", b)
	}
	if r := airlock(t, url, "", "cp", id+":/workspace/in.txt", "-"); r.out != "payload\n" {
		t.Errorf("download to stdout: %+v", r)
	}
	if r := airlock(t, url, "", "cp", src, dir); r.code != exitUsage {
		t.Errorf("cp between two local paths: %+v, want a usage error", r)
	}
	if r := airlock(t, url, "", "cp", id+":/nope", dir); r.code != exitError || !strings.Contains(r.errOut, "no such file") || strings.Contains(r.errOut, "airlock: airlock:") {
		t.Errorf("cp of a missing file: %+v", r)
	}
}

func TestListOutputs(t *testing.T) {
	_, url := newFakeGateway(t)
	id := strings.TrimSpace(airlock(t, url, "", "create").out)
	if r := airlock(t, url, "", "ls"); !strings.HasPrefix(r.out, "ID ") || !strings.HasPrefix(strings.Join(strings.Fields(r.out), " "), "ID STATUS TEMPLATE SIZE NETWORK AGE EXPIRES "+id+" ready python-node") {
		t.Errorf("ls table:\n%q %q %d", r.out, r.errOut, r.code)
	}
	var list []map[string]any
	if r := airlock(t, url, "", "ls", "-o", "json"); json.Unmarshal([]byte(r.out), &list) != nil || len(list) != 1 || list[0]["id"] != id {
		t.Errorf("ls -o json: %q", r.out)
	}
	if r := airlock(t, url, "", "get", id, "--output", "yaml"); !strings.Contains(r.out, "id: "+id+"\n") {
		t.Errorf("get -o yaml: %q", r.out)
	}
	if r := airlock(t, url, "", "ls", "-o", "xml"); r.code != exitUsage {
		t.Errorf("ls -o xml: %+v", r)
	}
	if r := airlock(t, url, "", "rm", id, "sbx-none"); r.code != 0 || !strings.Contains(r.out, id+" deleted") || !strings.Contains(r.out, "sbx-none already gone") {
		t.Errorf("rm: %+v", r)
	}
}

func TestErrorsSayWhatToDo(t *testing.T) {
	_, url := newFakeGateway(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var out, errOut bytes.Buffer
	t.Setenv("AIRLOCK_API_URL", url)
	t.Setenv("AIRLOCK_API_KEY", "")
	if code := run(context.Background(), "airlock", []string{"ls"}, strings.NewReader(""), &out, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), "airlock keys create --tenant") {
		t.Errorf("ls without a key: exit %d, %q", code, errOut.String())
	}
	if r := airlock(t, url, "", "ls", "--api-key", "alk_wrong"); r.code != exitError || !strings.Contains(r.errOut, "run 'airlock login'") {
		t.Errorf("ls with a wrong key: %+v", r)
	}
	if r := airlock(t, url, "", "exec", "sbx-9", "--", "true"); r.code != exitNoRun || !strings.Contains(r.errOut, "'airlock ls'") {
		t.Errorf("exec in a missing sandbox: %+v, want 125 and a hint", r)
	}
	for _, args := range [][]string{{"exec", "sbx-1"}, {"exec", "sbx-1", "--sh", "x", "--", "y"}, {"run"}, {"bogus"}, {"create", "--timeout", "90s"}} {
		if r := airlock(t, url, "", args...); r.code != exitUsage || !strings.Contains(r.errOut, "--help") {
			t.Errorf("%v: %+v, want a usage error", args, r)
		}
	}
}

func TestLoginWritesAPrivateConfig(t *testing.T) {
	_, url := newFakeGateway(t)
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	t.Setenv("AIRLOCK_API_URL", "")
	t.Setenv("AIRLOCK_API_KEY", "")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), "airlock", []string{"login", "--api-url", url}, strings.NewReader("alk_test\n"), &out, &errOut); code != 0 {
		t.Fatalf("login: %d %s", code, errOut.String())
	}
	p := filepath.Join(cfgDir, "airlock", "config.json")
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("login file %s: %v %v, want mode 0600", p, st, err)
	}
	// The file alone now suffices.
	if code := run(context.Background(), "airlock", []string{"ls"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Errorf("ls after login: %d %s", code, errOut.String())
	}
	if code := run(context.Background(), "airlock", []string{"login", "--api-url", url, "--api-key", "alk_wrong"}, strings.NewReader(""), &out, &errOut); code != exitError {
		t.Errorf("login with a wrong key: %d, want a refusal", code)
	}
}

func TestEveryCommandHasExamplesAndTheKubectlName(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot("airlock", streams{}))
	var out bytes.Buffer
	if code := run(context.Background(), "kubectl-airlock", []string{"--help"}, strings.NewReader(""), &out, &out); code != 0 || !strings.Contains(out.String(), "kubectl airlock [command]") {
		t.Errorf("as kubectl-airlock: %d %s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), "airlock", []string{"completion", "bash"}, strings.NewReader(""), &out, &out); code != 0 || !strings.Contains(out.String(), "__start_airlock") {
		t.Errorf("completion bash: %d", code)
	}
}
