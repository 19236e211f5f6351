// Command testbin stands in for airlock-init in tests: it dispatches pid1,
// exec and status (and the supervisor's re-executions) as cmd/airlock-init
// does, without the setup subcommand.
package main

import (
	"fmt"
	"os"

	"airlock.dev/airlock/internal/initproc"
	"airlock.dev/airlock/internal/runwrap"
)

func main() {
	if code, ok := runwrap.Reexec(); ok {
		os.Exit(code)
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbin pid1|exec|status")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pid1":
		os.Exit(initproc.PID1(os.Args[2:], os.Stderr))
	case "exec":
		os.Exit(runwrap.ExecMain(os.Args[2:]))
	case "status":
		os.Exit(runwrap.StatusMain(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "testbin: unknown command %q\n", os.Args[1])
	os.Exit(2)
}
