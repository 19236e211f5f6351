package runwrap

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
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

// keeperMain owns one run for the supervisor: it starts the command, tees its
// output, enforces the limits and writes the trailer, exactly as a separate
// process so that each run's tree is found from its own subreaper.
func keeperMain() int {
	// Before anything arrives on the control socket: the stream descriptors
	// and the nonce must never be reachable through /proc.
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
	st := startStarter() // while we wait for the run
	var cfg Config
	files, err := recvFrameFiles(ctl, &cfg, 3)
	received := time.Now()
	if errors.Is(err, io.EOF) {
		if st != nil {
			st.discard()
		}
		return 0 // a spare keeper PID 1 no longer needs
	}
	if err != nil || len(files) < 2 {
		fmt.Fprintf(os.Stderr, "airlock-init keeper: receive run: %v (%d descriptors)\n", err, len(files))
		return ExitWrapperError
	}
	var op Request
	pipes, err := recvFrameFiles(ctl, &op, 4)
	if err != nil || op.Op != opPipes || len(pipes) != 4 {
		fmt.Fprintf(os.Stderr, "airlock-init keeper: receive output pipes: %v (%d descriptors)\n", err, len(pipes))
		return ExitWrapperError
	}
	if err := WriteFrame(ctl, &Reply{Accepted: true}); err != nil {
		return ExitWrapperError // PID 1 is gone or gave up on us
	}
	// The exec stream becomes our stdio, so the output code below is the
	// same whether or not a supervisor sits in between.
	for i, target := range []int{1, 2, 0} {
		if i < len(files) {
			if err := syscall.Dup3(int(files[i].Fd()), target, 0); err != nil {
				fmt.Fprintf(os.Stderr, "airlock-init keeper: dup: %v\n", err)
				return ExitWrapperError
			}
			_ = files[i].Close()
		}
	}
	s := &supervisor{cfg: cfg, killReq: make(chan struct{}, 1), pipes: pipes, received: received, starter: st}
	s.stdout = newStreamOut(1, "stdout")
	s.stderr = newStreamOut(2, "stderr")
	t, code := s.run(ctl)
	// The trailer is written: let go of the stream before PID 1 answers,
	// so the exec need not wait for this process to exit.
	closeAll([]*os.File{s.stdout.f, s.stderr.f, os.Stdin})
	_ = WriteFrame(ctl, &Reply{Known: true, Done: true, Trailer: &t, Code: code})
	return code
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
