package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"airlock.dev/airlock/internal/podexec"
)

// grace is the engine's default SIGTERM-to-SIGKILL delay; slack covers two exec round trips under gVisor.
const (
	grace = 2 * time.Second
	slack = 5 * time.Second
)

func noProcess(t *testing.T, ns, name, comm string) {
	t.Helper()
	ps := sh(t, ns, name, "ps -eo pid,ppid,comm,args --no-headers", 10*time.Second)
	if strings.Contains(ps.Stdout, comm) {
		t.Fatalf("%q survived:\n%s", comm, ps.Stdout)
	}
}

// TestSupervisorDeadlineHoldsWhateverTheCommandDoes: every command is supervised by PID 1 (airlock-init pid1),
// which kill -9 -1 cannot reach; the exec'd client and the run's keeper can be killed, the deadline still
// holds, the outcome is timeout (never sandbox_lost while the sandbox is alive), and nothing is left.
func TestSupervisorDeadlineHoldsWhateverTheCommandDoes(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "sup")
	waitReady(t, ns, "sup")

	start := time.Now()
	res := sh(t, ns, "sup", "kill -9 -1; sleep 1001", 3*time.Second)
	took := time.Since(start)
	t.Logf("kill -9 -1; sleep 1001: outcome=%s exit=%d signal=%s detail=%q in %v", res.Outcome, res.ExitCode, res.Signal, res.Detail, took)
	if res.Outcome != podexec.OutcomeTimeout || took > 3*time.Second+grace+slack {
		t.Fatalf("want outcome timeout within 3s + grace, got %s in %v: %+v", res.Outcome, took, res)
	}
	noProcess(t, ns, "sup", "sleep 1001")

	// The same with the command's output flowing: its keeper dies, PID 1 holds the output pipes (no SIGPIPE
	// for the next write), forwards what follows and finishes the run.
	start = time.Now()
	res = sh(t, ns, "sup", "echo before; kill -9 -1; sleep 0.5; echo after; sleep 1003", 3*time.Second)
	took = time.Since(start)
	t.Logf("with output: outcome=%s stdout=%q in %v", res.Outcome, res.Stdout, took)
	if res.Outcome != podexec.OutcomeTimeout || took > 3*time.Second+grace+slack {
		t.Fatalf("want outcome timeout within 3s + grace, got %+v in %v", res, took)
	}
	if !strings.Contains(res.Stdout, "after\n") {
		t.Fatalf("output written after the keeper died is missing: %q", res.Stdout)
	}
	noProcess(t, ns, "sup", "sleep 1003")
}

// TestSupervisorForkBombTimesOut: a foreground fork bomb hits the process limit (RLIMIT_NPROC on the command
// alone), ends at its timeout with outcome timeout, nothing of it is left, and the sandbox keeps its state.
func TestSupervisorForkBombTimesOut(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "bomb")
	waitReady(t, ns, "bomb")
	if r := sh(t, ns, "bomb", "echo kept > $HOME/state", 10*time.Second); r.Outcome != podexec.OutcomeExited {
		t.Fatalf("write state: %+v", r)
	}
	start := time.Now()
	res := sh(t, ns, "bomb", "bomb() { bomb | bomb & }; bomb; sleep 1006", 15*time.Second)
	took := time.Since(start)
	t.Logf("fork bomb: outcome=%s exit=%d detail=%q in %v", res.Outcome, res.ExitCode, res.Detail, took)
	if res.Outcome != podexec.OutcomeTimeout || took > 15*time.Second+grace+slack {
		t.Fatalf("want outcome timeout within 15s + grace, got %s in %v: %+v", res.Outcome, took, res)
	}
	if r := sh(t, ns, "bomb", "cat $HOME/state; ps -eo args --no-headers | grep -c -e 'sleep 100[0-9]' -e '^/bin/sh -c bomb' || true", 30*time.Second); !strings.HasPrefix(r.Stdout, "kept\n") {
		t.Fatalf("after the fork bomb the sandbox must answer with its state: %+v", r)
	} else if strings.TrimSpace(strings.TrimPrefix(r.Stdout, "kept\n")) != "0" {
		t.Fatalf("fork bomb processes left: %q", r.Stdout)
	}
}

// TestSupervisorNoForgery: no secret is readable by a command (argv of every process, environments, PID 1's
// and the clients' descriptors), and a fake trailer written to every descriptor it can reach does not change
// its exit code.
func TestSupervisorNoForgery(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "forge")
	waitReady(t, ns, "forge")
	script := `
for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2>/dev/null; echo
  tr '\0' '\n' < $p/environ 2>/dev/null
done > /tmp/seen 2>&1
printf 'AIRLOC%s1\n"non%sce"\n' K '' > /tmp/pat
grep -c -F -f /tmp/pat /tmp/seen || true
cat /proc/1/environ >/dev/null 2>&1 && echo PID1-ENVIRON-READABLE
for f in /proc/1/fd/*; do timeout 1 sh -c 'exec 9<"$1"' _ "$f" 2>/dev/null && echo "PID1-FD-OPENED $f"; done
n=0
for f in /proc/[0-9]*/fd/*; do
  case "$f" in /proc/$$/*|/proc/self/*) continue;; esac
  if { printf '\nFAKE {"v":1,"exit_code":0,"timed_out":false}\n' > "$f"; } 2>/dev/null; then n=$((n+1)); fi
done
echo "wrote to $n foreign descriptors"
printf '\nFAKE {"v":1,"exit_code":0}\n' >&2
exit 3`
	res := sh(t, ns, "forge", script, 30*time.Second)
	t.Logf("forgery attempt: outcome=%s exit=%d stdout=%q", res.Outcome, res.ExitCode, res.Stdout)
	if res.Outcome != podexec.OutcomeExited || res.ExitCode != 3 {
		t.Fatalf("a forged trailer changed the result: %+v", res)
	}
	if !strings.HasPrefix(res.Stdout, "0\n") || strings.Contains(res.Stdout, "PID1-") || !strings.Contains(res.Stdout, "wrote to 0 foreign") {
		t.Fatalf("a command could read a request or PID 1's descriptors: %q", res.Stdout)
	}
}

// TestSupervisorLeftoversAndPID1Kill: the leftovers rule (a foreground command's background processes are
// killed when it exits unless KeepBackground), and the gVisor caveat: kill -9 1 by the sandbox uid ends the
// sandbox container under gVisor; that is reported as sandbox_lost (or timeout where PID 1 is protected), and
// nothing outlives it.
func TestSupervisorLeftoversAndPID1Kill(t *testing.T) {
	ns := newTenant(t)
	createSandbox(t, ns, "left")
	waitReady(t, ns, "left")
	res := sh(t, ns, "left", "setsid sleep 1004 >/dev/null 2>&1 & echo started", 10*time.Second)
	if res.Outcome != podexec.OutcomeExited || res.Trailer == nil || res.Trailer.LeftoversKilled < 1 {
		t.Fatalf("leftover not reported killed: %+v", res)
	}
	noProcess(t, ns, "left", "sleep 1004")

	start := time.Now()
	res = sh(t, ns, "left", "sleep 1005 & kill -9 1; sleep 1005", 5*time.Second)
	t.Logf("kill -9 1: outcome=%s detail=%q in %v", res.Outcome, res.Detail, time.Since(start))
	if res.Outcome != podexec.OutcomeSandboxLost && res.Outcome != podexec.OutcomeTimeout {
		t.Fatalf("kill -9 1: want sandbox_lost (gVisor) or timeout, got %+v", res)
	}
	if res.Outcome == podexec.OutcomeTimeout {
		noProcess(t, ns, "left", "sleep 1005") // PID 1 protected (runc): the supervisor did its job
		return
	}
	// The sandbox container ended with its PID 1 (restartPolicy Never): the whole gVisor sandbox, every process
	// in it included, is gone.
	eventually(t, time.Minute, "the sandbox container has terminated", func() error {
		pod := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "left"}, pod); err != nil {
			return err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "sandbox" && cs.State.Terminated != nil {
				return nil
			}
		}
		return fmt.Errorf("pod %s: %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	})
}
