// Command airlock-init is Airlock's only binary inside a sandbox. It is static and needs nothing from the
// image. Subcommands:
//
//	pid1    (sandbox container) prove the runtime's and the network's isolation (the gate), then open the
//	        readiness port, stay alive, reap orphans, supervise every command, and kill the largest command
//	        before the sandbox runs out of memory (env AIRLOCK_MEMORY_GUARD: headroom in MiB, or off)
//	exec    (each exec) hand the request on stdin to pid1, which runs the command and writes its output
//	status  (after a lost exec) read a run's outcome back from pid1
//	ctl     list background processes, read their output, write their stdin, signal or kill them
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
  exec    run one command through pid1; the request is a frame on stdin, never in argv
  status  print the outcome of a run (request frame on stdin)
  ctl     list, read output of, write stdin to, signal or kill runs (request frame on stdin)
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
	case "exec":
		os.Exit(runwrap.ExecMain(args))
	case "status", "ctl":
		os.Exit(runwrap.ControlMain(os.Args[1], args))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "airlock-init: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
