package runwrap

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

const (
	roleEnv    = "AIRLOCK_RUNWRAP_ROLE"
	roleKeeper = "keeper"
	roleLimit  = "limit"
	// execPathEnv carries the resolved program to the limit trampoline.
	execPathEnv = "AIRLOCK_RUNWRAP_EXEC"
	// fdControl is the keeper's socket to the supervisor.
	fdControl = 3
)

// Reexec runs the hidden roles the supervisor starts with /proc/self/exe: a
// run's keeper, and the trampoline that applies the process limit to the
// command alone. The binary must call it first thing; ok is false for a
// normal invocation.
func Reexec() (code int, ok bool) {
	switch os.Getenv(roleEnv) {
	case roleKeeper:
		return keeperMain(), true
	case roleLimit:
		return limitMain(), true
	case roleStarter:
		return starterMain(), true
	}
	return 0, false
}

// keeperMain owns runs for the supervisor, one at a time: it starts the command, tees its output, enforces the
// limits and reports the outcome, exactly as a separate process so that each run's tree is found from its own
// subreaper. When a run leaves nothing behind, the keeper tells PID 1 it is idle and may take the next run,
// which then costs no process start; a run that leaves processes (kept on purpose) ends the keeper, so that
// they re-parent to PID 1.
func keeperMain() int {
	// Before anything arrives on the control socket: the runs' requests and streams must never be reachable
	// through /proc.
	if err := setNotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init keeper: %v\n", err)
		return ExitWrapperError
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	_ = os.Unsetenv(roleEnv) // the command must not inherit it
	syscall.CloseOnExec(fdControl)
	fc, err := net.FileConn(os.NewFile(fdControl, "control"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init keeper: control socket: %v\n", err)
		return ExitWrapperError
	}
	ctl := fc.(*net.UnixConn)
	in := readKeeperControl(ctl)
	for {
		st := startStarter() // while we wait for the run
		run, ok := <-in.runs
		if !ok {
			if st != nil {
				st.discard()
			}
			return 0 // PID 1 no longer needs us
		}
		code, clean := keepRun(ctl, in, run, st)
		if !clean {
			return code
		}
		if err := WriteFrame(ctl, &Reply{Idle: true}); err != nil {
			return code
		}
	}
}

// keepRun runs one run the keeper received; clean says it left nothing behind.
func keepRun(ctl *net.UnixConn, in *keeperControl, run keeperRun, st *starter) (code int, clean bool) {
	if err := WriteFrame(ctl, &Reply{Accepted: true}); err != nil {
		closeAll(append(run.files, run.pipes...))
		return ExitWrapperError, false // PID 1 is gone or gave up on us
	}
	s := &supervisor{cfg: run.cfg, killReq: make(chan struct{}, 1), pipes: run.pipes, received: run.received, starter: st,
		control: in.current(run.cfg.ID), lost: in.lost, finished: make(chan struct{})}
	s.stdin = run.stdin()
	s.stdout, s.stderr = newStreamOut(run.files[0], s.stdin), newStreamOut(run.files[1], s.stdin)
	t, code := s.run(ctl)
	close(s.finished)
	in.current("")
	// The outcome is complete: let go of the stream before PID 1 answers, so the call need not wait for us.
	// Of the command's pipes, run closed the write ends; the read ends are ours to close (the keeper lives on).
	closeAll([]*os.File{s.stdout.f, s.stderr.f, s.stdin, run.pipes[0], run.pipes[2]})
	if err := WriteFrame(ctl, &Reply{Known: true, Done: true, Trailer: &t, Code: code}); err != nil {
		return code, false
	}
	return code, !hasChildren() || len(liveDescendants(os.Getpid())) == 0
}

// limitMain is exec'd (as the command's own process, in its session) when a
// process limit applies: it lowers RLIMIT_NPROC for itself only, then
// becomes the command. The keeper and the supervisor keep their higher
// limits, so they can still start threads when a fork bomb has used up the
// uid's allowance.
func limitMain() int {
	path := os.Getenv(execPathEnv)
	_ = os.Unsetenv(execPathEnv)
	_ = os.Unsetenv(roleEnv)
	if err := applyProcessLimit(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		return 126
	}
	err := syscall.Exec(path, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "airlock: exec %s: %v\n", path, err)
	if err == syscall.ENOENT {
		return 127
	}
	return 126
}
