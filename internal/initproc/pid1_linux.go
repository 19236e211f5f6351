package initproc

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"airlock.dev/airlock/internal/attestation"
	"airlock.dev/airlock/internal/pid1link"
	"airlock.dev/airlock/internal/runwrap"
)

// PID1 keeps the sandbox container running between commands and supervises every command: each exec is a
// thin `airlock-init exec` client that hands its request to the supervisor listening here (runwrap), because
// PID 1 is the one process a command cannot kill with kill -9 -1 and it outlives every exec. It also reaps
// orphans (background jobs, daemonised servers), or the sandbox fills with zombies until its pid limit is hit.
// Its memory guard kills the largest command before the sandbox nears its memory limit, so one greedy command
// does not cost the sandbox (runwrap.MemoryGuard). It is not dumpable, so commands (same uid) cannot read its
// session key, the runs' requests or the streams it holds through /proc. It exits 0 on SIGTERM or SIGINT, so pod
// deletion is quick.
//
// Before it serves, it attests (package attestation): one line on its log with its session key (pid1link) and
// what its gate saw, which the controller checks and records; the gateway then talks only to this key's holder.
//
// Before it serves any command it runs the gate (gate.go): the runtime must be the isolation its RuntimeClass
// promised and the sandbox's NetworkPolicy must be in effect. Until then its socket does not exist, so no
// command can run, and its readiness port (--ready-port, the pod's httpGet readiness probe) holds its answer;
// if the gate fails, PID 1 exits 1 with the reason in the termination log and the pod fails.
func PID1(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("pid1", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var gate gateConfig
	gate.bind(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "airlock-init pid1: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := gate.check(); err != nil {
		fmt.Fprintln(stderr, "airlock-init pid1:", err)
		return 2
	}
	if err := gate.checkProtocol(); err != nil {
		fmt.Fprintln(stderr, "airlock-init:", err)
		writeTerminationLog(stderr, gate.termLog, err.Error())
		return 1
	}
	if os.Getpid() != 1 {
		// Not fatal (e.g. a shared process namespace): orphans then go to the real PID 1.
		fmt.Fprintln(stderr, "airlock-init pid1: warning: not running as PID 1; orphans are reaped only if re-parented here")
		_ = runwrap.BecomeSubreaper()
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: PR_SET_DUMPABLE: %v\n", err)
		return 1
	}
	// The session key exists before any command can: none can have seen it.
	id, err := pid1link.NewIdentity()
	if err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ready, err := listenReady(gate.readyPort, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	}
	type gated struct {
		res *gateResult
		err error
	}
	gateDone := make(chan gated, 1)
	go func() {
		res, err := gate.run(stderr)
		gateDone <- gated{res, err}
	}()
	var seen *gateResult
	for seen == nil {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				return 0
			}
		case g := <-gateDone:
			if g.err != nil {
				fmt.Fprintln(stderr, "airlock-init:", g.err)
				writeTerminationLog(stderr, gate.termLog, g.err.Error())
				return 1
			}
			seen = g.res
		}
	}
	sup, err := runwrap.NewSupervisor(stderr, id)
	if err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	}
	ln, err := runwrap.Listen()
	if err != nil {
		// Without it no command can run: fail loudly rather than look ready.
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	}
	defer ln.Close()
	// Before readiness, which is when the controller reads it: no command can exist yet.
	if err := attest(stderr, id, &gate, seen); err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	}
	// Last: the readiness port says the gate passed and commands are served.
	ready.pass(sup.Healthy)
	if headroom, on, err := runwrap.ParseMemoryGuard(os.Getenv(runwrap.MemoryGuardEnv)); err != nil {
		fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		return 1
	} else if on {
		g := runwrap.MemoryGuard{Headroom: headroom, Interval: runwrap.DefaultMemoryPoll, Usage: runwrap.SandboxMemory}
		if u, err := g.Usage(); err == nil {
			fmt.Fprintf(stderr, "airlock-init pid1: memory guard: %s: %d MiB used of %d MiB; kills the largest command above limit - %d MiB\n",
				u.Source, u.Used>>20, u.Limit>>20, headroom>>20)
		}
		go sup.GuardMemory(g)
	}
	go func() {
		if err := sup.Serve(ln); err != nil {
			fmt.Fprintf(stderr, "airlock-init pid1: %v\n", err)
		}
	}()
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return 0
		}
		// One SIGCHLD may stand for many exits.
		sup.Reap()
	}
	return 0
}

// attest writes PID 1's attestation (package attestation) to log: its session key and what its gate saw.
func attest(log io.Writer, id *pid1link.Identity, g *gateConfig, seen *gateResult) error {
	line, err := attestation.Line(attestation.Statement{Key: id.PublicKey(), Isolation: seen.runtime.isolation,
		Method: seen.runtime.method, Unverified: seen.runtime.unverified, Kernel: seen.kernel,
		GVisorMarker: seen.marker, GateTarget: seen.target, Gate: string(seen.gate), ProxyTarget: seen.proxyTarget})
	if err != nil {
		return err
	}
	if _, err := log.Write(line); err != nil {
		return fmt.Errorf("write attestation: %w", err)
	}
	return nil
}

// PID1ForTests is PID1 for tests, which run it outside a pod, with no network policy and no node: an empty
// --gate-host skips the network gate and a loopback target counts. airlock-init never calls it.
func PID1ForTests(args []string, stderr io.Writer) int {
	localGateTargets = true
	return PID1(args, stderr)
}
