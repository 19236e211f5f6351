package podexec

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"airlock.dev/airlock/internal/testutil/sleepers"
)

func TestEngineExitCodesAndStreams(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, nil)
			for _, code := range []int{0, 1, 42} {
				res := env.run(t, Request{Shell: "echo out; echo err >&2; exit " + itoa(code)})
				if res.Outcome != OutcomeExited || res.ExitCode != code {
					t.Fatalf("exit %d: %+v", code, res)
				}
				if res.Stdout != "out\n" || res.Stderr != "err\n" || res.StdoutBytes != 4 || res.StderrBytes != 4 {
					t.Fatalf("streams: %q %q", res.Stdout, res.Stderr)
				}
				if res.Truncated || res.Trailer == nil || res.Protocol != wantProtocol(p) {
					t.Fatalf("result %+v", res)
				}
			}
		})
	}
}

func wantProtocol(p Protocol) string {
	if p == ProtocolSPDY {
		return "spdy"
	}
	return "websocket"
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestEngineStdin(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, nil)
			// No stdin: cat sees EOF at once and ends.
			res := env.run(t, Request{Argv: []string{"cat"}, Timeout: 20 * time.Second})
			if res.Outcome != OutcomeExited || res.ExitCode != 0 || res.Stdout != "" {
				t.Fatalf("cat without stdin: %+v", res)
			}
			// Stdin data, then EOF (half-close over both transports).
			in := strings.Repeat("line of input\n", 10000)
			res = env.run(t, Request{Argv: []string{"sh", "-c", "wc -c; cat >/dev/null; echo done"}, Stdin: []byte(in), Timeout: 20 * time.Second})
			if res.Outcome != OutcomeExited || strings.TrimSpace(res.Stdout) != itoa(len(in))+"\ndone" {
				t.Fatalf("stdin: %+v", res)
			}
			// Empty but present stdin.
			res = env.run(t, Request{Argv: []string{"cat"}, Stdin: []byte{}, Timeout: 20 * time.Second})
			if res.Outcome != OutcomeExited || res.Stdout != "" {
				t.Fatalf("empty stdin: %+v", res)
			}
			// A reader is streamed: the command sees all of it, then EOF.
			res = env.run(t, Request{Argv: []string{"wc", "-c"}, StdinReader: strings.NewReader(in), Timeout: 20 * time.Second})
			if res.Outcome != OutcomeExited || strings.TrimSpace(res.Stdout) != itoa(len(in)) {
				t.Fatalf("stdin reader: %+v", res)
			}
		})
	}
}

func TestEngineCwdEnvAndStartErrors(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	dir := t.TempDir()
	res := env.run(t, Request{Shell: `pwd; echo "$GREETING"`, Cwd: dir, Env: map[string]string{"GREETING": "hi there"}})
	if res.Stdout != dir+"\nhi there\n" {
		t.Fatalf("%q", res.Stdout)
	}
	res = env.run(t, Request{Argv: []string{"no-such-command-xyz"}})
	if res.Outcome != OutcomeExited || res.ExitCode != 127 || !strings.Contains(res.Detail, "no-such-command-xyz") || !strings.Contains(res.Stderr, "no-such-command-xyz") {
		t.Fatalf("not found: %+v", res)
	}
}

func TestEngineTimeoutKillsProcessGroup(t *testing.T) {
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			env := newEnv(t, p, nil)
			a, b := sleepers.Unique(t), sleepers.Unique(t)
			start := time.Now()
			res := env.run(t, Request{Shell: "echo started; sleep " + a + " & sleep " + b, Timeout: time.Second})
			if res.Outcome != OutcomeTimeout || res.Stdout != "started\n" {
				t.Fatalf("%+v", res)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("timeout took %v", d)
			}
			sleepers.WaitNone(t, a, time.Second)
			sleepers.WaitNone(t, b, time.Second)
		})
	}
}

func TestEngineSignalAndOutputLimit(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	res := env.run(t, Request{Shell: "kill -TERM $$"})
	if res.Outcome != OutcomeSignal || res.Signal != "SIGTERM" || res.ExitCode != -1 {
		t.Fatalf("signal: %+v", res)
	}
	res = env.run(t, Request{Argv: []string{"yes"}, KillAfterOutputBytes: 1 << 20})
	if res.Outcome != OutcomeOutputLimit || res.StdoutBytes != 1<<20 || !res.Truncated {
		t.Fatalf("output limit: %+v", res.Truncation)
	}
}

func TestEngineInvalidUTF8(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	res := env.run(t, Request{Shell: `printf '\377\376 ok \342\202'; printf 'caf\303\251 \200' >&2`})
	if res.Stdout != `\xff\xfe ok \xe2\x82` || res.Stderr != `café \x80` {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if res.Truncation.Stdout.InvalidUTF8Bytes != 4 || res.StdoutBytes != 8 {
		t.Fatalf("%+v", res.Truncation.Stdout)
	}
	b, err := json.Marshal(res)
	if err != nil || !utf8.Valid(b) {
		t.Fatalf("json: %v", err)
	}
}

func TestEngineTruncationEndToEnd(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	res := env.run(t, Request{Shell: "seq 1 100000; seq 1 3 >&2", KeepBytes: 1024, HeadBytes: 100})
	tr := res.Truncation.Stdout
	if !res.Truncated || !tr.Truncated || tr.Truncated == res.Truncation.Stderr.Truncated {
		t.Fatalf("%+v", res.Truncation)
	}
	full, err := os.ReadFile(tr.FullOutputPath)
	if err != nil {
		t.Fatalf("full output file: %v", err)
	}
	if int64(len(full)) != res.StdoutBytes || !strings.HasPrefix(res.Stdout, string(full[:100])) || !strings.HasSuffix(res.Stdout, string(full[len(full)-924:])) {
		t.Fatalf("head/tail do not match the full output")
	}
	mark := marker("stdout", tr.FullOutputPath, int64(len(full))-1024)
	if !strings.Contains(res.Stdout, mark) || !strings.HasPrefix(tr.FullOutputPath, env.home+"/.airlock/out/") {
		t.Fatalf("marker %q missing from %q", mark, res.Stdout)
	}
	if res.Stderr != "1\n2\n3\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

// A forged trailer (another nonce, or the right format mid-stream) is data.
func TestEngineForgedTrailerIsData(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	forged := `\nnonceBBBBBBBBBBBBBBBBBBBBBBBBBBB {"v":1,"exit_code":0,"timed_out":false}\n`
	res := env.run(t, Request{Shell: "printf '" + forged + "' >&2; exit 3"})
	if res.Outcome != OutcomeExited || res.ExitCode != 3 || !strings.Contains(res.Stderr, "nonceBBBB") {
		t.Fatalf("%+v", res)
	}
}

func TestEngineStreamChunks(t *testing.T) {
	env := newEnv(t, ProtocolAuto, nil)
	var out, errs, errRaw strings.Builder
	var next int64
	res, err := env.eng.Stream(t.Context(), env.keyed(Request{Namespace: "ns", Pod: "p", Shell: `seq 1 50000; printf 'é\377' >&2`, KeepBytes: 512}),
		func(c Chunk) error {
			if !utf8.ValidString(c.Data) {
				t.Errorf("invalid UTF-8 chunk %q", c.Data)
			}
			if c.Stream == "stderr" {
				errs.WriteString(c.Data)
				errRaw.Write(c.Raw)
				return nil
			}
			if c.Offset != next { // stdout is ASCII: raw offsets match text
				t.Errorf("stdout chunk at %d, want %d", c.Offset, next)
			}
			out.WriteString(c.Data)
			next += int64(len(c.Data))
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(res.Truncation.Stdout.FullOutputPath)
	if out.String() != string(full) || errs.String() != `é\xff` || errRaw.String() != "é\xff" || !res.Truncated {
		t.Fatalf("streamed %d bytes vs %d in file; stderr %q", out.Len(), len(full), errs.String())
	}
}

// Calls to one sandbox share one session: one exec for many commands, and Warm opens it ahead of the first.
func TestEngineSessionIsShared(t *testing.T) {
	env := newEnv(t, ProtocolWebSocket, nil)
	env.eng.Warm(env.keyed(Request{Namespace: "ns", Pod: "sandbox-0"}))
	deadline := time.Now().Add(10 * time.Second)
	for env.srv.WebSocketRequests.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res := env.run(t, Request{Shell: "echo " + itoa(i)})
			if res.Outcome != OutcomeExited || res.Stdout != itoa(i)+"\n" {
				t.Errorf("%d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	if n := env.srv.WebSocketRequests.Load(); n != 1 {
		t.Fatalf("%d execs for a warmed session and 8 commands, want 1", n)
	}
}
