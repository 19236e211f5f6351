package runwrap

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under a process limit the command is the process a keeper started ahead (the starter), or, when that one
// is gone, the trampoline's: either way RLIMIT_NPROC is the command's alone, hard and soft, and the command
// gets its stdin, cwd, env and own session.
func TestProcessLimitStarter(t *testing.T) {
	env := []string{SocketEnv + fmt.Sprintf("=@airlock-runwrap-nproc-%d", os.Getpid())}
	pid1, key, err := startPID1Env(wrapperBin, append(env, ProcessLimitEnv+"=77"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pid1.Process.Kill(); _ = pid1.Wait() }()

	cwd := t.TempDir()
	run := func(stdin *string, args ...string) runResult {
		t.Helper()
		r, rep := runOn(t, openSessionEnv(t, env, key), parseRun(t, args...), stdin)
		if rep.Error != "" {
			t.Fatalf("run refused: %s", rep.Error)
		}
		return r
	}
	check := func(what string) {
		t.Helper()
		in := "from stdin\n"
		r := run(&in, "--cwd", cwd, "--env", "GREETING=first", "--env", "GREETING=last", "--shell",
			`grep '^Max processes' /proc/self/limits | tr -s ' '; pwd; echo "$GREETING"; cat; ps -o sid= -p $$ | tr -d ' '; echo $$`)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.trailer == nil || r.trailer.ExitCode != 0 || len(lines) != 6 {
			t.Fatalf("%s: %+v stdout %q stderr %q", what, r.trailer, r.stdout, r.stderr)
		}
		if strings.Join(strings.Fields(lines[0]), " ") != "Max processes 77 77 processes" || lines[1] != cwd || lines[2] != "last" || lines[3] != "from stdin" || lines[4] != lines[5] {
			t.Fatalf("%s: limit, cwd, env, stdin or session wrong: %q", what, lines)
		}
	}
	check("first run")
	check("second run") // a fresh spare keeper and starter
	if r := run(nil, "--cwd", "/no/such/dir", "--", "true"); r.trailer == nil || r.trailer.ExitCode != 126 || !strings.Contains(r.trailer.StartError, "chdir") {
		t.Fatalf("bad cwd: %+v", r.trailer)
	}
	if r := run(nil, "--", "/no/such/program"); r.trailer == nil || r.trailer.ExitCode != 127 {
		t.Fatalf("missing program: %+v", r.trailer)
	}

	// A command killing the waiting starters (same uid) costs the next run its head start, nothing else.
	killed := processesNamed(t, pid1.Process.Pid, "airlock-init-starter")
	for _, pid := range killed {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range killed { // dead before the run comes (see starter.exec on the race)
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if st, ok := readStat(pid); !ok || st.state == 'Z' {
				break
			}
		}
	}
	check("after the starters were killed")
}

// processesNamed waits for, and lists, the descendants of root whose argv[0] is name.
func processesNamed(t *testing.T, root int, name string) []int {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var out []int
		for _, pid := range liveDescendants(root) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(b), name+"\x00") {
				out = append(out, pid)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	t.Fatalf("no %s under %d", name, root)
	return nil
}
