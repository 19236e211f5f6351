package initproc

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// PID1 keeps the sandbox container running between commands. Commands run through pods/exec leave orphans
// (background jobs, daemonised servers); they are re-parented to PID 1, which must reap them or the sandbox
// fills with zombies until its pid limit is hit. It exits 0 on SIGTERM or SIGINT, so pod deletion is quick.
func PID1(args []string, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "airlock-init pid1: takes no arguments")
		return 2
	}
	if os.Getpid() != 1 {
		// Not fatal (e.g. a shared process namespace): orphans then go to the real PID 1.
		fmt.Fprintln(stderr, "airlock-init pid1: warning: not running as PID 1; orphans are reaped only if re-parented here")
		_ = setChildSubreaper()
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return 0
		}
		reapAll()
	}
	return 0
}

// reapAll collects every exited child; one SIGCHLD may stand for many exits.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
