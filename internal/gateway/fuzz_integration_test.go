package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
	"airlock.dev/airlock/internal/testutil/execserver"
)

// FuzzIntegrationHandlers fuzzes the gateway's whole HTTP API (docs/reliability.md, "HTTP API fuzzing"): a
// method, a path with its query, headers and a body go to the real handler (Server.Handler() behind a real
// listener, on envtest, with a real API key), and for every input:
//
//   - no answer is a 500 (the recoverer turns a panic into one) and no other 5xx except a 503 with
//     Retry-After, which a healthy envtest never causes;
//   - every error answer of the REST API is the JSON error envelope {"error": {"code", "message"}};
//   - the gateway still answers a plain GET and an exec afterwards (it is not wedged).
//
// The seed corpus is testdata/fuzz/FuzzIntegrationHandlers (real calls of every route, and hostile ones); in
// paths, query strings and bodies, {sbx} stands for a Ready sandbox of the key's tenant, {other} for another
// tenant's, {pid} for an exited background process of {sbx} and {run} for a running one.
//
// Commands run on this machine, through the local exec server. A fuzzed body runs whatever command (and file
// path, cwd, env) it says, so the "container" is confined: the wrapper, its supervisor and every command run as
// nobody (no capabilities, no new privileges, bounded process count and file size), with a home and working
// directory under the test's temporary directory. Nobody can write only there and in world-writable
// directories; it cannot touch root's files or other processes.
func FuzzIntegrationHandlers(f *testing.F) {
	worker := flag.Lookup("test.fuzzworker") != nil && flag.Lookup("test.fuzzworker").Value.String() == "true"
	if worker {
		// A fuzz worker talks to the coordinator over inherited pipes without close-on-exec: etcd and the
		// supervisor would inherit them, and the coordinator waits for their EOF when it stops the worker.
		closeOnExecInherited(f)
	}
	fz := newFuzzGateway(f)
	if worker {
		// The coordinator kills its workers at the end without running cleanups: reap what we started then.
		fz.watchdog(f)
	}
	f.Fuzz(func(t *testing.T, method, target, headers string, body []byte) {
		fz.one(t, method, target, headers, body)
	})
}

// nobody is the unprivileged user the fuzzed commands run as.
const nobodyID = 65534

type fuzzGateway struct {
	*gw
	ns, key  string
	root     string
	workDir  string
	other    string // a sandbox of another tenant
	canary   string // a sandbox no input can name, for the liveness check
	sbx      string // {sbx}; recreated if an input deletes it
	pid, run string
	client   *http.Client
}

func newFuzzGateway(f *testing.F) *fuzzGateway {
	f.Helper()
	if os.Geteuid() != 0 {
		f.Fatal("fuzzed commands run on this machine, confined to user nobody: that needs root (make test runs as root: the local cluster needs it too)")
	}
	root := f.TempDir()
	// t.TempDir's directories are 0700 root: nobody must traverse them to reach its own.
	for d := root; d != os.TempDir() && d != "/" && strings.HasPrefix(d, os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	home, work := filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{home, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			f.Fatal(err)
		}
		if err := os.Chown(d, nobodyID, nobodyID); err != nil {
			f.Fatalf("the fuzz test confines commands to user nobody and needs root to do so: %v", err)
		}
	}
	confined := confinedWrapper(f, root, wrapper(f))
	xs := execserver.Start(execserver.Options{Rewrite: map[string]string{podexec.DefaultWrapperPath: confined},
		Supervisor: confined, Env: []string{"HOME=" + home}, Dir: home})
	engine, err := podexec.New(xs.RESTConfig(), podexec.Options{})
	if err != nil {
		xs.Close()
		f.Fatal(err)
	}
	g := newGateway(f, func(o *Options) {
		o.Engine = engine
		o.ReadyTimeout = 200 * time.Millisecond
		o.CreateRate, o.CreateBurst = 1000, 1000
		o.MaxExecTimeout = 5 * time.Second
	})
	// newGateway's own exec server (commands as root) is not used: the cleanup closes the confined one.
	g.exec.Close()
	g.exec = xs
	fz := &fuzzGateway{gw: g, root: root, workDir: work, client: &http.Client{Timeout: 15 * time.Second,
		// The gateway's own answer is under test, not the one at a redirect's target (the mux cleans paths so).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	fz.ns, fz.key = g.tenant(f, 100000)
	otherNS, _ := g.tenant(f, 10)
	fz.other = g.readySandbox(f, otherNS, work)
	fz.canary = g.readySandbox(f, fz.ns, work)
	// Never fuzz unconfined.
	if code, m := g.do(f, fz.key, "POST", "/v1/sandboxes/"+fz.canary+"/exec", `{"command": "id -u; pwd"}`); code != http.StatusOK || m["stdout"] != fmt.Sprintf("%d\n%s\n", nobodyID, work) {
		f.Fatalf("commands are not confined to nobody in %s: %d %v", work, code, m)
	}
	fz.sbx = g.readySandbox(f, fz.ns, work)
	fz.startProcesses(f)
	return fz
}

func closeOnExecInherited(tb testing.TB) {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// watchdog starts a process that, once this one is gone, kills the kube-apiserver and etcd it started and
// removes their directories and the test's.
func (fz *fuzzGateway) watchdog(tb testing.TB) {
	tb.Helper()
	pids, dirs := []string{}, []string{fz.root, filepath.Dir(wrapper(tb))}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range procs {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		fields := strings.Fields(string(b[i+1:]))
		if i < 0 || len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(st), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if base := filepath.Base(args[0]); base != "etcd" && base != "kube-apiserver" {
			continue
		}
		pids = append(pids, filepath.Base(filepath.Dir(st)))
		for _, a := range args {
			for _, flag := range []string{"--data-dir=", "--cert-dir="} {
				if d, ok := strings.CutPrefix(a, flag); ok && strings.HasPrefix(d, os.TempDir()) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	script := `tail --pid="$1" -f /dev/null; kill -9 ` + strings.Join(pids, " ") + `; sleep 1; rm -rf -- "$@"`
	cmd := osexec.Command("/bin/sh", append([]string{"-c", script, "watchdog", strconv.Itoa(os.Getpid())}, dirs...)...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	_ = cmd.Process.Release()
}

// confinedWrapper writes a script that runs the wrapper as nobody, and returns its path. Changing the user
// clears the parent-death signal (execserver's DieWithParent), so setpriv sets it again.
func confinedWrapper(tb testing.TB, dir, wrapperBin string) string {
	tb.Helper()
	p := filepath.Join(dir, "confined-airlock-init")
	script := fmt.Sprintf(`#!/bin/sh
exec /usr/bin/setpriv --reuid=%[1]d --regid=%[1]d --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs --pdeathsig=SIGKILL \
	/usr/bin/prlimit --nproc=1024 --fsize=%[2]d -- %[3]q "$@"
`, nobodyID, 64<<20, wrapperBin)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	// The wrapper binary lives in a 0700 temporary directory too.
	if err := os.Chmod(filepath.Dir(wrapperBin), 0o755); err != nil {
		tb.Fatal(err)
	}
	return p
}

// startProcesses starts {pid} (exits at once) and {run} (runs until the test ends) in {sbx}.
func (fz *fuzzGateway) startProcesses(tb testing.TB) {
	tb.Helper()
	start := func(cmd string) string {
		code, m := fz.do(tb, fz.key, "POST", "/v1/sandboxes/"+fz.sbx+"/exec", map[string]any{"command": cmd, "background": true})
		id, _ := m["process_id"].(string)
		if code != http.StatusAccepted || id == "" {
			tb.Fatalf("background exec: %d %v", code, m)
		}
		return id
	}
	fz.pid, fz.run = start("echo done"), start("exec sleep 300")
	tb.Cleanup(func() { _, _, _ = fz.try(fz.key, "DELETE", "/v1/sandboxes/"+fz.sbx+"/processes/"+fz.run, nil) })
}

// refresh recreates {sbx} if an input deleted it (or its processes went with it).
func (fz *fuzzGateway) refresh(t *testing.T) {
	var sb airlockv1.Sandbox
	err := fz.c.Get(context.Background(), types.NamespacedName{Namespace: fz.ns, Name: fz.sbx}, &sb)
	switch {
	case apierrors.IsNotFound(err) || err == nil && (sb.DeletionTimestamp != nil || sb.Status.Phase != airlockv1.PhaseReady):
		fz.sbx = fz.readySandbox(t, fz.ns, fz.workDir)
		fz.startProcesses(t)
	case err != nil:
		t.Fatal(err)
	}
}

func (fz *fuzzGateway) expand(s string) string {
	return strings.NewReplacer("{sbx}", fz.sbx, "{other}", fz.other, "{pid}", fz.pid, "{run}", fz.run).Replace(s)
}

func (fz *fuzzGateway) one(t *testing.T, method, target, headers string, body []byte) {
	fz.refresh(t)
	req, ok := fz.request(method, target, headers, body)
	if !ok {
		return // not an HTTP request a client can send
	}
	resp, err := fz.client.Do(req)
	if err != nil {
		// The transport refused to send it (e.g. a header value it will not encode), or the answer took longer
		// than the client waits (a fuzzed command may sleep): neither is the gateway's fault; the liveness
		// check below still holds.
		t.Logf("%s %q: %v", method, target, err)
	} else {
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		_ = resp.Body.Close()
		checkAnswer(t, req, resp, raw, rerr)
	}
	fz.alive(t)
}

// request builds the fuzzed request, with the test's key unless the input brings its own Authorization.
func (fz *fuzzGateway) request(method, target, headers string, body []byte) (*http.Request, bool) {
	if method == "" || method == "CONNECT" || strings.ContainsAny(method, " \t\r\n/?#:@") {
		return nil, false
	}
	target = fz.expand(target)
	if !strings.HasPrefix(target, "/") {
		target = "/" + target
	}
	u, err := url.Parse(fz.http.URL + target)
	if err != nil || u.Host != strings.TrimPrefix(fz.http.URL, "http://") {
		return nil, false
	}
	// Go's client sends a raw query as it is: a space or control byte in it makes a request line that net/http's
	// server refuses (a plain 400) before any handler.
	if strings.IndexFunc(u.RequestURI(), func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return nil, false
	}
	req, err := http.NewRequest(method, u.String(), bytes.NewReader([]byte(fz.expand(string(body)))))
	if err != nil {
		return nil, false
	}
	req.Header.Set("Authorization", "Bearer "+fz.key)
	sc := bufio.NewScanner(strings.NewReader(headers))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length") ||
			strings.EqualFold(k, "Transfer-Encoding") || strings.EqualFold(k, "Connection") {
			continue
		}
		if strings.EqualFold(k, "Authorization") {
			req.Header.Del(k)
		}
		req.Header.Add(k, fz.expand(strings.TrimSpace(v)))
	}
	return req, true
}

// checkAnswer asserts what every answer must be.
func checkAnswer(t *testing.T, req *http.Request, resp *http.Response, raw []byte, rerr error) {
	t.Helper()
	what := fmt.Sprintf("%s %s -> %d %q", req.Method, req.URL.RequestURI(), resp.StatusCode, trim(raw))
	switch {
	case resp.StatusCode == http.StatusInternalServerError:
		t.Fatalf("500 (a recovered panic or an unexpected error): %s", what)
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "":
		t.Fatalf("503 without Retry-After: %s", what)
	case resp.StatusCode == http.StatusServiceUnavailable:
		t.Logf("503 (the cluster was busy?): %s", what)
	case resp.StatusCode >= 500:
		t.Fatalf("5xx: %s", what)
	}
	if rerr != nil && resp.StatusCode < 300 {
		// A download cut after its first byte is how the gateway reports a broken transfer (files.go).
		t.Logf("reading the answer: %v: %s", rerr, what)
		return
	}
	// /mcp speaks JSON-RPC and the MCP SDK's own HTTP errors, not the REST envelope; net/http itself answers an
	// Expect other than 100-continue with a plain 417, before any handler.
	if resp.StatusCode < 400 || req.Method == http.MethodHead || req.URL.Path == "/mcp" || resp.StatusCode == http.StatusExpectationFailed {
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error answer with Content-Type %q: %s", ct, what)
	}
	var env struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Error == nil || env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("error answer is not the JSON error envelope (%v): %s", err, what)
	}
}

// alive checks that the gateway still serves a read and an exec after the input.
func (fz *fuzzGateway) alive(t *testing.T) {
	t.Helper()
	code, m, err := fz.call("GET", "/v1/sandboxes/"+fz.canary, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("the gateway is wedged after the input: GET the canary sandbox: %d %v %v", code, m, err)
	}
	code, m, err = fz.call("POST", "/v1/sandboxes/"+fz.canary+"/exec", `{"command": "echo alive"}`)
	// The gateway works if it runs the command and reports what happened; the command itself may fail when
	// fuzzed inputs have used up nobody's process limit (background processes, forks) for a while.
	if err != nil || code != http.StatusOK || m["outcome"] == nil {
		t.Fatalf("the gateway is wedged after the input: exec in the canary sandbox: %d %v %v", code, m, err)
	}
	if m["stdout"] != "alive\n" {
		t.Logf("the canary's exec ran but failed (nobody's process limit?): %v", m)
	}
}

// call is gw.try with the test's client, which gives up after a while rather than hang the fuzzer.
func (fz *fuzzGateway) call(method, path, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, fz.http.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+fz.key)
	resp, err := fz.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, m, nil
}

func trim(b []byte) []byte {
	if len(b) > 300 {
		return append(b[:300:300], "..."...)
	}
	return b
}
