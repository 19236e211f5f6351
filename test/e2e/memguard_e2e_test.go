package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
	"airlock.dev/airlock/internal/podexec"
)

// usageScript prints the sandbox's memory as PID 1's guard reads it (the cgroup if it has a limit, else
// /proc/meminfo), then, with an argument, allocates in steps of that many MiB (touched) and prints the usage
// after each step, so the last line printed before the pod died is the largest usage the host allowed.
const usageScript = `import sys, time
def used():
    try:
        lim = int(open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read())
        if lim < 1 << 60:
            u = int(open("/sys/fs/cgroup/memory/memory.usage_in_bytes").read())
            st = dict(l.split() for l in open("/sys/fs/cgroup/memory/memory.stat"))
            return "cgroup", u - int(st.get("total_inactive_file", 0)), lim
    except OSError:
        pass
    m = dict((l.split(":")[0], int(l.split()[1]) << 10) for l in open("/proc/meminfo"))
    return "meminfo", m["MemTotal"] - m["MemAvailable"], m["MemTotal"]
src, u, l = used()
print("%s used=%d limit=%d" % (src, u >> 20, l >> 20), flush=True)
x = []
while len(sys.argv) > 1:
    x.append(b"\x01" * (int(sys.argv[1]) << 20))
    time.sleep(0.05)
    print("step used=%d" % (used()[1] >> 20), flush=True)
`

// TestSupervisorMemoryGuard: a command that allocates without bound is killed by PID 1's memory guard with
// outcome oom before the host's OOM killer takes the sandbox; the sandbox stays Ready, keeps its files, and
// the next command works, under gVisor and runc. "runc-kernel" has the guard off: the kernel OOM-kills the
// command inside the container's cgroup, which is still reported oom. The guard is the manager's setting for
// the pods it creates (--memory-guard; a sandbox's env cannot set AIRLOCK_MEMORY_GUARD), so each sandbox is made
// under a manager started with its own. AIRLOCK_E2E_MEMORY_GUARD=off runs the test with the guard disabled in
// every sandbox; it then fails under gVisor (shown once): the pod is OOMKilled and the Sandbox Failed.
func TestSupervisorMemoryGuard(t *testing.T) {
	guard := os.Getenv("AIRLOCK_E2E_MEMORY_GUARD")
	cases := []struct{ name, tpl, guard string }{
		{"gvisor", "python-node", guard}, {"runc", "python-node-runc", guard}, {"runc-kernel", "python-node-runc", "off"},
	}
	tenants := map[string]string{}
	for _, tc := range cases {
		restartManager(t, managerFlags(tc.guard)...) // runc is refused by default
		ns := newTenant(t)
		createSandbox(t, ns, "mem", withTemplate(tc.tpl), func(s *airlockv1.Sandbox) { s.Spec.Size = airlockv1.SizeSmall })
		waitReady(t, ns, "mem")
		tenants[tc.name] = ns
	}
	for _, tc := range cases {
		name, ns := tc.name, tenants[tc.name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := sh(t, ns, "mem", "echo kept > $HOME/state; python3 -c '"+usageScript+"'; cd /sys/fs/cgroup/memory && "+
				"grep -H . memory.limit_in_bytes memory.usage_in_bytes; head -2 /proc/meminfo", 20*time.Second)
			t.Logf("%s idle: %s", name, strings.TrimSpace(r.Stdout))

			start := time.Now()
			res := sh(t, ns, "mem", "python3 -c 'x=[]\nwhile True: x.append(bytearray(64<<20))'", 60*time.Second)
			took := time.Since(start)
			t.Logf("%s greedy python: outcome=%s signal=%s detail=%q in %v", name, res.Outcome, res.Signal, res.Detail, took)
			if res.Outcome != podexec.OutcomeOOM || took > 15*time.Second {
				t.Errorf("want outcome oom within 15s, got %s in %v: %+v", res.Outcome, took, res)
			}
			if name == "gvisor" && !strings.Contains(res.Detail, "memory guard") {
				t.Errorf("under gVisor the guard must be what killed it, detail %q", res.Detail)
			}
			time.Sleep(2 * time.Second) // a pod OOM kill shows in the Sandbox within a second or two
			if s, err := getSandbox(ns, "mem"); err != nil || s.Status.Phase != airlockv1.PhaseReady {
				t.Fatalf("the sandbox must survive the greedy command: %v %s", err, describe(s))
			}
			if r := sh(t, ns, "mem", "cat $HOME/state", 20*time.Second); r.Stdout != "kept\n" {
				t.Fatalf("after the guard's kill the sandbox must answer with its files: %+v", r)
			}

			// The same with steps of 16 MiB, printing the usage after each: the largest usage reached.
			res = sh(t, ns, "mem", "python3 -c '"+usageScript+"' 16", 60*time.Second)
			lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
			t.Logf("%s 16 MiB steps: outcome=%s detail=%q last usage: %s", name, res.Outcome, res.Detail, lines[len(lines)-1])
			if res.Outcome != podexec.OutcomeOOM {
				t.Errorf("stepwise allocation: want oom, got %+v", res)
			}
			if r := sh(t, ns, "mem", "cat $HOME/state", 20*time.Second); r.Stdout != "kept\n" {
				t.Fatalf("after the second kill the sandbox must answer with its files: %+v", r)
			}
		})
	}
}

// BenchmarkMemoryHeadroom measures, with the guard off, the largest usage seen inside before the host's OOM
// killer ends the sandbox (gVisor) or the kernel kills the command (runc): limit minus that is the headroom the
// guard needs. It ends a sandbox, so it is a measurement for `make bench-e2e`, not part of `make test`.
func BenchmarkMemoryHeadroom(b *testing.B) {
	restartManager(b, managerFlags("off")...)
	for name, tpl := range map[string]string{"gvisor": "python-node", "runc": "python-node-runc"} {
		b.Run(name, func(b *testing.B) {
			ns := newTenant(b)
			createSandbox(b, ns, "mem", withTemplate(tpl), func(s *airlockv1.Sandbox) { s.Spec.Size = airlockv1.SizeSmall })
			waitReady(b, ns, "mem")
			for _, step := range []string{"4", "16", "64"} {
				res := sh(b, ns, "mem", "python3 -c '"+usageScript+"' "+step, 60*time.Second)
				lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
				time.Sleep(2 * time.Second)
				s, _ := getSandbox(ns, "mem")
				b.Logf("%s steps of %s MiB: outcome=%s, first %q, last %q; sandbox %s", name, step, res.Outcome, lines[0], lines[len(lines)-1], describe(s))
				if s == nil || s.Status.Phase != airlockv1.PhaseReady {
					return
				}
			}
		})
	}
}

// managerFlags are the memory tests' manager flags: runc allowed, and PID 1's memory guard in the pods it
// creates (empty: airlock-init's default).
func managerFlags(guard string) []string {
	flags := []string{"--allow-unisolated-runtimes"}
	if guard != "" {
		flags = append(flags, "--memory-guard="+guard)
	}
	return flags
}
