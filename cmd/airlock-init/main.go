// Command airlock-init is Airlock's only binary inside a sandbox. It is static and needs nothing from the
// image. Subcommands:
//
//	setup  (init container) install airlock-init for the sandbox container, then wait for network isolation
//	pid1   (sandbox container) stay alive between commands and reap orphans
//	run    (each exec) run one command in its own process group with a timeout and full-output capture
package main

import (
	"fmt"
	"os"

	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/runwrap"
)

const usage = `Usage: airlock-init <command> [flags]

Commands:
  setup   install airlock-init into a shared volume and wait until network isolation is in effect
  pid1    run as the sandbox container's PID 1: stay alive and reap orphaned processes
  run     run one command in its own process group, with a timeout and full-output capture
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "setup":
		os.Exit(initproc.Setup(args, os.Stderr))
	case "pid1":
		os.Exit(initproc.PID1(args, os.Stderr))
	case "run":
		os.Exit(runwrap.Main(args, os.Stdin, os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "airlock-init: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
