// Command airlock-init is Airlock's only binary inside a sandbox. It is static and needs nothing from the
// image. Subcommands:
//
//	pid1    (sandbox container) prove the runtime's and the network's isolation (the gate), then open the
//	        readiness port, stay alive, reap orphans, supervise every command, and kill the largest command
//	        before the sandbox runs out of memory (env AIRLOCK_MEMORY_GUARD: headroom in MiB, or off)
//	connect (the gateway's exec) hand the exec's stdin and stdout to pid1, which speaks an authenticated
//	        session on them (TLS pinned to the key it attested): every command, status and control call
//	install (an init container, where image volumes are not available) copy this binary to DEST, which
//	        the sandbox container mounts read-only
package main

import (
	"fmt"
	"os"

	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/runwrap"
)

const usage = `Usage: airlock-init <command> [flags]

Commands:
  pid1    run as the sandbox container's PID 1: first prove the runtime's isolation and wait until the
          network policy is in effect (the gate: pid1 --help), then open the readiness port
          (--ready-port), reap orphans and supervise every command; its memory guard kills the largest command above the memory limit minus
          AIRLOCK_MEMORY_GUARD MiB (default 160; off disables it)
  connect hand this exec's stdin and stdout to pid1 for a session with the gateway (TLS, pinned to the key
          pid1 attested in its log); commands, their output and outcomes, and control calls travel inside it
  install DEST
          copy this binary to DEST (written beside it, then renamed): how a pod gets airlock-init from the init
          image where image volumes are not available (the manager's --init-delivery)
`

func main() {
	// pid1 re-executes itself for each run's keeper: those never take a subcommand.
	if code, ok := runwrap.Reexec(); ok {
		os.Exit(code)
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "pid1":
		os.Exit(initproc.PID1(args, os.Stderr))
	case "connect":
		os.Exit(runwrap.ConnectMain(args))
	case "install":
		os.Exit(initproc.Install(args, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "airlock-init: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
