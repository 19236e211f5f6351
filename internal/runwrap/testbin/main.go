// Command testbin stands in for `airlock-init run` in tests: it dispatches
// argv[1] == "run" to runwrap.Main exactly as cmd/airlock-init does.
package main

import (
	"fmt"
	"os"

	"airlock.dev/airlock/internal/runwrap"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: testbin run ARGS...")
		os.Exit(2)
	}
	os.Exit(runwrap.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
}
