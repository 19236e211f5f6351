// Command testbin stands in for airlock-init in tests: it dispatches pid1,
// exec and status (and the supervisor's re-executions) as cmd/airlock-init
// does, without the setup subcommand.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

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
	case "pid1-fakemem":
		os.Exit(fakeMemPID1(os.Args[2]))
	case "exec":
		os.Exit(runwrap.ExecMain(os.Args[2:]))
	case "status":
		os.Exit(runwrap.StatusMain(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "testbin: unknown command %q\n", os.Args[1])
	os.Exit(2)
}

// fakeMemPID1 is a supervisor whose memory guard reads "used limit" (bytes)
// from path instead of the sandbox's memory, so a test decides when it fires.
func fakeMemPID1(path string) int {
	sup := runwrap.NewSupervisor(os.Stderr)
	ln, err := runwrap.Listen()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() { _ = sup.Serve(ln) }()
	go sup.GuardMemory(runwrap.MemoryGuard{Headroom: 10 << 20, Interval: 20 * time.Millisecond, Usage: func() (runwrap.MemUsage, error) {
		var u runwrap.MemUsage
		b, err := os.ReadFile(path)
		if err == nil {
			_, err = fmt.Sscan(string(b), &u.Used, &u.Limit)
		}
		u.Source = "test"
		return u, err
	}})
	for range sigs {
		sup.Reap()
	}
	return 0
}
